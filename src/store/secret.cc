#include "store/secret.h"

#include <openssl/rand.h>
#include <poll.h>
#include <unistd.h>

#include <cerrno>
#include <map>
#include <mutex>

#include "core/error.h"

namespace hpct::store {
namespace {
constexpr size_t kMaxSecretBytes = 4096;
}  // namespace

std::string generate_secret() {
  unsigned char bytes[32];
  if (RAND_bytes(bytes, sizeof bytes) != 1)
    throw Error(ErrorCode::kIo, "RAND_bytes failed to make a job secret");
  static const char kDigits[] = "0123456789abcdef";
  std::string hex;
  for (unsigned char b : bytes) {
    hex += kDigits[b >> 4];
    hex += kDigits[b & 15];
  }
  return hex;
}

std::string read_secret_from_fd(int fd, Millis timeout) {
  const std::string what = "the job secret on fd " + std::to_string(fd);
  if (fd < 0) throw_invalid_argument(what + ": not a file descriptor (was HPCT_SECRET_FD set?)");
  Deadline deadline(timeout);
  std::string secret;
  char c;
  while (true) {
    pollfd p{fd, POLLIN, 0};
    int ready = ::poll(&p, 1, static_cast<int>(deadline.remaining().count()));
    if (ready < 0) {
      if (errno == EINTR) continue;
      throw_io("poll " + what, errno);
    }
    if (ready == 0)
      throw_timeout(what + ": nothing arrived within " + std::to_string(timeout.count()) + " ms");
    // One byte at a time: the secret is short, and reading past the newline
    // would swallow bytes that belong to whoever reads fd next.
    ssize_t n = ::read(fd, &c, 1);
    if (n < 0) {
      if (errno == EINTR || errno == EAGAIN) continue;
      throw_io("read " + what, errno);
    }
    if (n == 0 || c == '\n') break;
    if (secret.size() == kMaxSecretBytes) {
      throw_invalid_argument(what + " is longer than " + std::to_string(kMaxSecretBytes) +
                             " bytes");
    }
    secret += c;
  }
  if (!secret.empty() && secret.back() == '\r') secret.pop_back();
  if (secret.empty()) throw_invalid_argument(what + " is empty");
  return secret;
}

std::string job_secret(int fd) {
  // Process-wide by nature: the fd's bytes can be read once per process.
  static std::mutex mu;
  static std::map<int, std::string> read;
  std::lock_guard<std::mutex> lk(mu);
  auto it = read.find(fd);
  if (it == read.end()) it = read.emplace(fd, read_secret_from_fd(fd)).first;
  return it->second;
}

}  // namespace hpct::store
