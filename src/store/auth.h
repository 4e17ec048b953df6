// Authenticated framing for the TCP store: the handshake that proves both
// ends hold the job secret, and the MAC-sealed frames that follow it.
// tcp_store.h describes the whole protocol; this file holds its bytes.
//
// Handshake (fixed-size messages, so nothing is sized by an unauthenticated
// peer):
//   C -> S  ClientHello  magic (8) | client nonce cn (32)
//   S -> C  ServerHello  magic (8) | server nonce sn (32)
//   C -> S  ClientProof  HMAC(secret, "hpct-store/1 client" | cn | sn)   (32)
//   S -> C  Verdict      1 | HMAC(secret, "hpct-store/1 server" | cn | sn) (1 + 32)
//                    or  0 | 32 zero bytes, then S closes (wrong secret)
//   both    session key  K = HMAC(secret, "hpct-store/1 session" | cn | sn)
// Fresh nonces on both sides make every proof and every K single-use; the
// labels keep a client proof from passing as a server proof.
//
// Frames (after the handshake, both directions):
//   len (4, big-endian) | payload (len) | HMAC(K, dir | seq | len | payload) (32)
// dir is 'C' (client to server) or 'S'; seq is a per-direction counter from 0
// (8 bytes, big-endian) that is never sent: each side counts. A replayed,
// reordered, reflected or altered frame fails its MAC. len is checked against
// the receiver's maximum before a byte of payload is allocated.
//
// Every read and write is on a non-blocking socket with a deadline, and may
// be woken by wake_fd (a server stopping); nothing here blocks unbounded.
#pragma once

#include <array>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <string_view>

#include "core/clock.h"

namespace hpct::store::auth {

constexpr size_t kNonceBytes = 32;
constexpr size_t kMacBytes = 32;
constexpr size_t kFrameHeaderBytes = 4;
constexpr char kMagic[8] = {'H', 'P', 'C', 'T', 'S', 'T', '\0', '\1'};

using Mac = std::array<unsigned char, kMacBytes>;

enum class Direction : char { kClientToServer = 'C', kServerToClient = 'S' };

// Raised by the I/O below when wake_fd becomes readable; not an hpct::Error
// because it is not a failure, only a server stopping.
struct Woken {};

// No deadline: wait until data arrives or wake_fd fires.
constexpr SteadyClock::time_point kNoDeadline = SteadyClock::time_point::max();

// HMAC-SHA256 of the concatenated parts. Thread-safe.
Mac hmac_sha256(std::string_view key, std::initializer_list<std::string_view> parts);
// Constant-time comparison (CRYPTO_memcmp).
bool macs_equal(const Mac& a, const Mac& b);
std::string_view as_view(const Mac& m);

// Byte I/O on a non-blocking socket. what names the peer ("store client
// 127.0.0.1:4242") for messages. Raise PeerFailure when the peer closes or
// resets, Timeout when until passes, Io for other socket errors, Woken when
// wake_fd (may be -1) is readable.
void read_exact(int fd, char* buf, size_t n, SteadyClock::time_point until, int wake_fd,
                const std::string& what);
void write_all(int fd, const char* buf, size_t n, SteadyClock::time_point until, int wake_fd,
               const std::string& what);
// Waits until fd is readable; same errors as read_exact, except that a
// closed peer also counts as readable.
void wait_readable(int fd, SteadyClock::time_point until, int wake_fd, const std::string& what);
// Waits until fd takes more bytes; same errors as write_all.
void wait_writable(int fd, SteadyClock::time_point until, int wake_fd, const std::string& what);

// Client side of the handshake; returns the session key. Auth ("the job
// secret does not match: ...") when either side's proof fails, Mismatch when
// the peer does not speak this protocol.
Mac client_handshake(int fd, std::string_view secret, SteadyClock::time_point until,
                     const std::string& what);
// Server side; on a wrong client proof, tells the client and raises Auth.
Mac server_handshake(int fd, std::string_view secret, SteadyClock::time_point until, int wake_fd,
                     const std::string& what);

// The bytes of one sealed frame (header, payload, MAC). Exposed so tests can
// replay or alter frames.
std::string seal_frame(const Mac& key, Direction dir, std::uint64_t seq, std::string_view payload);

// One end of an authenticated connection: seals what it sends, checks what
// it receives, and counts sequence numbers both ways. Not thread-safe (one
// user at a time); does not own fd.
class FrameChannel {
 public:
  FrameChannel(int fd, const Mac& key, Direction outgoing, size_t max_frame_bytes, int wake_fd,
               std::string what);

  void send(std::string_view payload, SteadyClock::time_point until);

  // Waits until first_byte_until (kNoDeadline: until woken) for a frame to
  // start; from its first byte the whole frame must arrive within
  // frame_timeout. DataCorrupt, with nothing allocated, when len exceeds
  // max_frame_bytes; Auth when the MAC fails; else as read_exact.
  std::string recv(SteadyClock::time_point first_byte_until, Millis frame_timeout);

  // The largest payload buffer recv ever allocated.
  size_t largest_allocation() const { return largest_allocation_; }

 private:
  int fd_;
  Mac key_;
  Direction out_;
  Direction in_;
  size_t max_frame_bytes_;
  int wake_fd_;
  std::string what_;
  std::uint64_t send_seq_ = 0;
  std::uint64_t recv_seq_ = 0;
  size_t largest_allocation_ = 0;
};

}  // namespace hpct::store::auth
