#include "store/auth.h"

#include <openssl/core_names.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/params.h>
#include <openssl/rand.h>
#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <memory>

#include "core/error.h"

namespace hpct::store::auth {
namespace {

constexpr std::string_view kClientLabel = "hpct-store/1 client";
constexpr std::string_view kServerLabel = "hpct-store/1 server";
constexpr std::string_view kSessionLabel = "hpct-store/1 session";
constexpr size_t kHelloBytes = sizeof(kMagic) + kNonceBytes;

void put_be(char* out, std::uint64_t v, int bytes) {
  for (int i = bytes - 1; i >= 0; --i) {
    out[i] = static_cast<char>(v & 0xff);
    v >>= 8;
  }
}

std::uint64_t get_be(const char* in, int bytes) {
  std::uint64_t v = 0;
  for (int i = 0; i < bytes; ++i) v = (v << 8) | static_cast<unsigned char>(in[i]);
  return v;
}

std::string random_nonce() {
  std::string n(kNonceBytes, '\0');
  if (RAND_bytes(reinterpret_cast<unsigned char*>(n.data()), static_cast<int>(n.size())) != 1) {
    throw Error(ErrorCode::kIo, "RAND_bytes failed to make a store handshake nonce");
  }
  return n;
}

// Waits for events on fd; see read_exact for the errors.
void wait_ready(int fd, short events, SteadyClock::time_point until, int wake_fd,
                const std::string& what, const char* doing) {
  while (true) {
    auto now = SteadyClock::now();
    if (now >= until) throw_timeout("timed out " + std::string(doing) + " " + what);
    // Whole-second slices keep the arithmetic away from time_point::max().
    auto left = std::chrono::duration_cast<Millis>(until - now).count() + 1;
    int timeout_ms = static_cast<int>(std::min<long long>(left, 1000));
    pollfd fds[2] = {{fd, events, 0}, {wake_fd, POLLIN, 0}};
    int ready = ::poll(fds, wake_fd >= 0 ? 2 : 1, timeout_ms);
    if (ready < 0) {
      if (errno == EINTR) continue;
      throw_io("poll " + what, errno);
    }
    if (wake_fd >= 0 && fds[1].revents != 0) throw Woken{};
    if (fds[0].revents != 0) return;
  }
}

}  // namespace

Mac hmac_sha256(std::string_view key, std::initializer_list<std::string_view> parts) {
  std::unique_ptr<EVP_MAC, decltype(&EVP_MAC_free)> mac(EVP_MAC_fetch(nullptr, "HMAC", nullptr),
                                                        EVP_MAC_free);
  if (!mac) throw Error(ErrorCode::kIo, "OpenSSL has no HMAC implementation");
  std::unique_ptr<EVP_MAC_CTX, decltype(&EVP_MAC_CTX_free)> ctx(EVP_MAC_CTX_new(mac.get()),
                                                                EVP_MAC_CTX_free);
  char digest[] = "SHA256";
  OSSL_PARAM params[] = {OSSL_PARAM_construct_utf8_string(OSSL_MAC_PARAM_DIGEST, digest, 0),
                         OSSL_PARAM_construct_end()};
  Mac out{};
  size_t out_len = 0;
  bool ok = ctx && EVP_MAC_init(ctx.get(), reinterpret_cast<const unsigned char*>(key.data()),
                                key.size(), params) == 1;
  for (auto part : parts) {
    ok = ok && EVP_MAC_update(ctx.get(), reinterpret_cast<const unsigned char*>(part.data()),
                              part.size()) == 1;
  }
  ok = ok && EVP_MAC_final(ctx.get(), out.data(), &out_len, out.size()) == 1 &&
       out_len == out.size();
  if (!ok) throw Error(ErrorCode::kIo, "HMAC-SHA256 failed in OpenSSL");
  return out;
}

bool macs_equal(const Mac& a, const Mac& b) {
  return CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0;
}

std::string_view as_view(const Mac& m) {
  return {reinterpret_cast<const char*>(m.data()), m.size()};
}

void read_exact(int fd, char* buf, size_t n, SteadyClock::time_point until, int wake_fd,
                const std::string& what) {
  size_t off = 0;
  while (off < n) {
    ssize_t got = ::recv(fd, buf + off, n - off, MSG_DONTWAIT);
    if (got > 0) {
      off += static_cast<size_t>(got);
    } else if (got == 0) {
      throw_peer_failure(what + " closed the connection");
    } else if (errno == EAGAIN || errno == EWOULDBLOCK) {
      wait_ready(fd, POLLIN, until, wake_fd, what, "reading from");
    } else if (errno == ECONNRESET || errno == EPIPE) {
      throw_peer_failure(what + " reset the connection");
    } else if (errno != EINTR) {
      throw_io("recv from " + what, errno);
    }
  }
}

void write_all(int fd, const char* buf, size_t n, SteadyClock::time_point until, int wake_fd,
               const std::string& what) {
  size_t off = 0;
  while (off < n) {
    ssize_t put = ::send(fd, buf + off, n - off, MSG_DONTWAIT | MSG_NOSIGNAL);
    if (put >= 0) {
      off += static_cast<size_t>(put);
    } else if (errno == EAGAIN || errno == EWOULDBLOCK) {
      wait_ready(fd, POLLOUT, until, wake_fd, what, "writing to");
    } else if (errno == ECONNRESET || errno == EPIPE) {
      throw_peer_failure(what + " closed the connection");
    } else if (errno != EINTR) {
      throw_io("send to " + what, errno);
    }
  }
}

void wait_readable(int fd, SteadyClock::time_point until, int wake_fd, const std::string& what) {
  wait_ready(fd, POLLIN, until, wake_fd, what, "waiting for a message from");
}

void wait_writable(int fd, SteadyClock::time_point until, int wake_fd, const std::string& what) {
  wait_ready(fd, POLLOUT, until, wake_fd, what, "writing to");
}

Mac client_handshake(int fd, std::string_view secret, SteadyClock::time_point until,
                     const std::string& what) {
  const std::string cn = random_nonce();
  std::string hello(kMagic, sizeof(kMagic));
  hello += cn;
  write_all(fd, hello.data(), hello.size(), until, -1, what);

  char reply[kHelloBytes];
  read_exact(fd, reply, sizeof reply, until, -1, what);
  if (std::memcmp(reply, kMagic, sizeof(kMagic)) != 0) {
    throw_mismatch(what + " does not speak the hpctrain store protocol (version 1)");
  }
  const std::string sn(reply + sizeof(kMagic), kNonceBytes);

  Mac proof = hmac_sha256(secret, {kClientLabel, cn, sn});
  write_all(fd, reinterpret_cast<const char*>(proof.data()), proof.size(), until, -1, what);

  // A close instead of a verdict stays a PeerFailure (the server may be
  // stopping): a wrong secret always gets an explicit refusal.
  char verdict[1 + kMacBytes];
  read_exact(fd, verdict, sizeof verdict, until, -1, what);
  if (verdict[0] != 1) {
    throw Error(ErrorCode::kAuth,
                "the job secret does not match: " + what +
                    " refused this client's proof (the rank and the store were given "
                    "different secrets)");
  }
  Mac server_proof;
  std::memcpy(server_proof.data(), verdict + 1, kMacBytes);
  if (!macs_equal(server_proof, hmac_sha256(secret, {kServerLabel, cn, sn}))) {
    throw Error(ErrorCode::kAuth,
                "the job secret does not match: " + what +
                    " accepted this client but could not prove it holds the job secret");
  }
  return hmac_sha256(secret, {kSessionLabel, cn, sn});
}

Mac server_handshake(int fd, std::string_view secret, SteadyClock::time_point until, int wake_fd,
                     const std::string& what) {
  char hello[kHelloBytes];
  read_exact(fd, hello, sizeof hello, until, wake_fd, what);
  if (std::memcmp(hello, kMagic, sizeof(kMagic)) != 0) {
    throw_mismatch(what + " does not speak the hpctrain store protocol (version 1)");
  }
  const std::string cn(hello + sizeof(kMagic), kNonceBytes);
  const std::string sn = random_nonce();
  std::string reply(kMagic, sizeof(kMagic));
  reply += sn;
  write_all(fd, reply.data(), reply.size(), until, wake_fd, what);

  Mac client_proof;
  read_exact(fd, reinterpret_cast<char*>(client_proof.data()), client_proof.size(), until, wake_fd,
             what);
  char verdict[1 + kMacBytes] = {};
  if (!macs_equal(client_proof, hmac_sha256(secret, {kClientLabel, cn, sn}))) {
    try {
      write_all(fd, verdict, sizeof verdict, until, wake_fd, what);
    } catch (const Error&) {
      // The client left already; its proof was wrong either way.
    }
    throw Error(ErrorCode::kAuth,
                what + " failed authentication: its proof does not match the job secret");
  }
  verdict[0] = 1;
  Mac proof = hmac_sha256(secret, {kServerLabel, cn, sn});
  std::memcpy(verdict + 1, proof.data(), proof.size());
  write_all(fd, verdict, sizeof verdict, until, wake_fd, what);
  return hmac_sha256(secret, {kSessionLabel, cn, sn});
}

std::string seal_frame(const Mac& key, Direction dir, std::uint64_t seq, std::string_view payload) {
  char header[kFrameHeaderBytes];
  put_be(header, payload.size(), kFrameHeaderBytes);
  char seq_bytes[8];
  put_be(seq_bytes, seq, 8);
  const char dir_byte = static_cast<char>(dir);
  Mac mac =
      hmac_sha256(as_view(key), {std::string_view(&dir_byte, 1), std::string_view(seq_bytes, 8),
                                 std::string_view(header, kFrameHeaderBytes), payload});
  std::string frame;
  frame.reserve(kFrameHeaderBytes + payload.size() + kMacBytes);
  frame.append(header, kFrameHeaderBytes);
  frame.append(payload);
  frame.append(as_view(mac));
  return frame;
}

FrameChannel::FrameChannel(int fd, const Mac& key, Direction outgoing, size_t max_frame_bytes,
                           int wake_fd, std::string what)
    : fd_(fd),
      key_(key),
      out_(outgoing),
      in_(outgoing == Direction::kClientToServer ? Direction::kServerToClient
                                                 : Direction::kClientToServer),
      max_frame_bytes_(max_frame_bytes),
      wake_fd_(wake_fd),
      what_(std::move(what)) {}

void FrameChannel::send(std::string_view payload, SteadyClock::time_point until) {
  if (payload.size() > max_frame_bytes_ || payload.size() > 0xffffffffu) {
    throw_invalid_argument("a store message of " + std::to_string(payload.size()) + " bytes for " +
                           what_ + " exceeds the limit of " + std::to_string(max_frame_bytes_) +
                           " bytes (HPCT_MAX_FRAME_BYTES)");
  }
  const std::string frame = seal_frame(key_, out_, send_seq_, payload);
  write_all(fd_, frame.data(), frame.size(), until, wake_fd_, what_);
  ++send_seq_;
}

std::string FrameChannel::recv(SteadyClock::time_point first_byte_until, Millis frame_timeout) {
  wait_readable(fd_, first_byte_until, wake_fd_, what_);
  const auto until = SteadyClock::now() + frame_timeout;
  char header[kFrameHeaderBytes];
  read_exact(fd_, header, sizeof header, until, wake_fd_, what_);
  const std::uint64_t len = get_be(header, kFrameHeaderBytes);
  if (len > max_frame_bytes_) {
    // Refused on the prefix alone: nothing is allocated for it.
    throw_data_corrupt(what_ + " sent a frame of " + std::to_string(len) + " bytes; the limit is " +
                       std::to_string(max_frame_bytes_) + " (HPCT_MAX_FRAME_BYTES)");
  }
  std::string payload(len, '\0');
  largest_allocation_ = std::max<size_t>(largest_allocation_, len);
  read_exact(fd_, payload.data(), payload.size(), until, wake_fd_, what_);
  Mac got;
  read_exact(fd_, reinterpret_cast<char*>(got.data()), got.size(), until, wake_fd_, what_);
  char seq_bytes[8];
  put_be(seq_bytes, recv_seq_, 8);
  const char dir_byte = static_cast<char>(in_);
  Mac want =
      hmac_sha256(as_view(key_), {std::string_view(&dir_byte, 1), std::string_view(seq_bytes, 8),
                                  std::string_view(header, kFrameHeaderBytes), payload});
  if (!macs_equal(got, want)) {
    throw Error(ErrorCode::kAuth, "a message from " + what_ +
                                      " failed its MAC check (altered, replayed or out of order); "
                                      "closing the connection");
  }
  ++recv_seq_;
  return payload;
}

}  // namespace hpct::store::auth
