#include "net/auth.h"

#include <openssl/core_names.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/params.h>
#include <openssl/rand.h>

#include <cerrno>
#include <cstring>
#include <memory>

#include "core/error.h"
#include "net/socket.h"

namespace hpct::net {
namespace {

constexpr std::string_view kClientLabel = "hpct-net/1 client";
constexpr std::string_view kServerLabel = "hpct-net/1 server";
constexpr std::string_view kSessionLabel = "hpct-net/1 session";
constexpr size_t kHelloBytes = sizeof(kMagic) + kNonceBytes;

std::string random_nonce() { return random_bytes(kNonceBytes, "a handshake nonce"); }

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

Direction opposite(Direction d) {
  return d == Direction::kClientToServer ? Direction::kServerToClient
                                         : Direction::kClientToServer;
}

std::string random_bytes(size_t n, const char* for_what) {
  std::string out(n, '\0');
  if (RAND_bytes(reinterpret_cast<unsigned char*>(out.data()), static_cast<int>(out.size())) !=
      1) {
    throw Error(ErrorCode::kIo, std::string("RAND_bytes failed to make ") + for_what);
  }
  return out;
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
    throw_mismatch(what + " does not speak the hpctrain handshake (version 1)");
  }
  const std::string sn(reply + sizeof(kMagic), kNonceBytes);

  Mac proof = hmac_sha256(secret, {kClientLabel, cn, sn});
  write_all(fd, proof.data(), proof.size(), until, -1, what);

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
  // The magic first: a stranger speaking another protocol is refused on its
  // first 8 bytes, without waiting for 40.
  char hello[kHelloBytes];
  read_exact(fd, hello, sizeof(kMagic), until, wake_fd, what);
  if (std::memcmp(hello, kMagic, sizeof(kMagic)) != 0) {
    throw_mismatch(what + " does not speak the hpctrain handshake (version 1)");
  }
  read_exact(fd, hello + sizeof(kMagic), kNonceBytes, until, wake_fd, what);
  const std::string cn(hello + sizeof(kMagic), kNonceBytes);
  const std::string sn = random_nonce();
  std::string reply(kMagic, sizeof(kMagic));
  reply += sn;
  write_all(fd, reply.data(), reply.size(), until, wake_fd, what);

  Mac client_proof;
  read_exact(fd, client_proof.data(), client_proof.size(), until, wake_fd,
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

}  // namespace hpct::net
