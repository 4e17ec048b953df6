// The mutual HMAC handshake that opens every authenticated connection (the
// job store, the data server, the parameter servers, the direct mesh), and
// the HMAC-SHA256 primitives that frame.h seals messages with.
//
// Handshake (fixed-size messages, so nothing is sized by an unauthenticated
// peer):
//   C -> S  ClientHello  magic (8) | client nonce cn (32)
//   S -> C  ServerHello  magic (8) | server nonce sn (32)
//   C -> S  ClientProof  HMAC(secret, "hpct-net/1 client" | cn | sn)   (32)
//   S -> C  Verdict      1 | HMAC(secret, "hpct-net/1 server" | cn | sn) (1 + 32)
//                    or  0 | 32 zero bytes, then S closes (wrong secret)
//   both    session key  K = HMAC(secret, "hpct-net/1 session" | cn | sn)
// Fresh nonces on both sides make every proof and every K single-use; the
// labels keep a client proof from passing as a server proof. Every read and
// write of the handshake is bounded by its deadline: a stranger who says
// nothing, or says the wrong thing, is refused by then.
#pragma once

#include <array>
#include <cstddef>
#include <initializer_list>
#include <string>
#include <string_view>

#include "core/clock.h"

namespace hpct::net {

constexpr size_t kNonceBytes = 32;
constexpr size_t kMacBytes = 32;
constexpr char kMagic[8] = {'H', 'P', 'C', 'T', 'N', 'E', 'T', '\1'};

using Mac = std::array<unsigned char, kMacBytes>;

// Which way a frame goes; part of every frame's MAC so that a frame cannot
// be reflected back to its sender.
enum class Direction : char { kClientToServer = 'C', kServerToClient = 'S' };
Direction opposite(Direction d);

// HMAC-SHA256 of the concatenated parts. Thread-safe.
Mac hmac_sha256(std::string_view key, std::initializer_list<std::string_view> parts);
// Constant-time comparison (CRYPTO_memcmp).
bool macs_equal(const Mac& a, const Mac& b);
std::string_view as_view(const Mac& m);

// n bytes from OpenSSL's RAND_bytes; Io naming `for_what` when it fails.
std::string random_bytes(size_t n, const char* for_what);

// Client side of the handshake on a connected non-blocking socket; returns
// the session key. Auth ("the job secret does not match: ...") when either
// side's proof fails, Mismatch when the peer does not speak this protocol,
// Timeout when until passes, PeerFailure when the peer closes.
Mac client_handshake(int fd, std::string_view secret, SteadyClock::time_point until,
                     const std::string& what);
// Server side; on a wrong client proof, tells the client and raises Auth.
// wake_fd (may be -1): raises Woken (socket.h) when it becomes readable.
Mac server_handshake(int fd, std::string_view secret, SteadyClock::time_point until, int wake_fd,
                     const std::string& what);

}  // namespace hpct::net
