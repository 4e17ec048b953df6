#include "store/file_store.h"

#include <fcntl.h>
#include <openssl/evp.h>
#include <openssl/rand.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <thread>

#include "core/error.h"
#include "core/fd.h"
#include "net/socket.h"

namespace hpct::store {
namespace {

constexpr size_t kMaxEncodedName = 200;  // NAME_MAX is 255 on every Linux file system we meet
constexpr Millis kMinPoll(1);
constexpr Millis kMaxPoll(50);

std::string to_hex(const unsigned char* p, size_t n) {
  static const char kDigits[] = "0123456789abcdef";
  std::string s;
  s.reserve(2 * n);
  for (size_t i = 0; i < n; ++i) {
    s += kDigits[p[i] >> 4];
    s += kDigits[p[i] & 15];
  }
  return s;
}

std::string random_tag() {
  unsigned char b[8];
  if (RAND_bytes(b, sizeof b) != 1)
    throw Error(ErrorCode::kIo, "RAND_bytes failed for a file store temp name");
  return to_hex(b, sizeof b);
}

// Sleeps for the next step of a 1 ms .. 50 ms backoff, never past deadline.
void backoff_sleep(Millis* step, const Deadline& deadline) {
  std::this_thread::sleep_for(std::min(*step, deadline.remaining()));
  *step = std::min(*step * 2, kMaxPoll);
}

}  // namespace

FileStore::FileStore(std::string dir, Millis lock_timeout)
    : dir_(std::move(dir)), lock_timeout_(lock_timeout), tmp_tag_(random_tag()) {
  if (dir_.empty()) throw_invalid_argument("file store: the directory is empty");
  if (::mkdir(dir_.c_str(), 0700) != 0 && errno != EEXIST)
    throw_io("file store: mkdir " + dir_, errno);
  struct stat st;
  if (::stat(dir_.c_str(), &st) != 0) throw_io("file store: stat " + dir_, errno);
  if (!S_ISDIR(st.st_mode))
    throw Error(ErrorCode::kIo, "file store: " + dir_ + " is not a directory");
}

std::string FileStore::file_name_for_key(const std::string& key) {
  std::string name = "k_";
  for (unsigned char c : key) {
    if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
        c == '-') {
      name += static_cast<char>(c);
    } else {
      name += '%';
      name += to_hex(&c, 1);
    }
    if (name.size() > kMaxEncodedName) break;
  }
  if (name.size() <= kMaxEncodedName) return name;
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  if (EVP_Digest(key.data(), key.size(), digest, &len, EVP_sha256(), nullptr) != 1) {
    throw Error(ErrorCode::kIo, "file store: SHA-256 of a long key failed");
  }
  return "h_" + to_hex(digest, len);
}

void FileStore::write_atomically(const std::string& path, const std::string& value,
                                 const std::string& key) {
  const std::string tmp = dir_ + "/.tmp." + tmp_tag_ + "." +
                          std::to_string(tmp_counter_.fetch_add(1)) + "." +
                          std::to_string(::getpid());
  UniqueFd fd(::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600));
  if (!fd.valid()) throw_io("file store: create " + tmp + " for key " + printable_key(key), errno);
  try {
    net::write_all(fd.get(), value.data(), value.size(), net::kNoDeadline, -1,
                   tmp + " for key " + printable_key(key));
    if (::close(fd.release()) != 0) throw_io("file store: close " + tmp, errno);
    if (::rename(tmp.c_str(), path.c_str()) != 0)
      throw_io("file store: rename " + tmp + " to " + path, errno);
  } catch (...) {
    ::unlink(tmp.c_str());
    throw;
  }
}

bool FileStore::try_read(const std::string& path, const std::string& key,
                         std::string* value) const {
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd.valid()) {
    if (errno == ENOENT) return false;
    throw_io("file store: open " + path + " for key " + printable_key(key), errno);
  }
  std::string out;
  char buf[65536];
  while (true) {
    ssize_t n = ::read(fd.get(), buf, sizeof buf);
    if (n < 0) {
      if (errno == EINTR) continue;
      throw_io("file store: read " + path + " for key " + printable_key(key), errno);
    }
    if (n == 0) break;
    out.append(buf, static_cast<size_t>(n));
  }
  *value = std::move(out);
  return true;
}

void FileStore::set(const std::string& key, const std::string& value) {
  write_atomically(path_for(key), value, key);
}

std::string FileStore::get(const std::string& key, Millis timeout) {
  const std::string path = path_for(key);
  Deadline deadline(timeout);
  Millis step = kMinPoll;
  std::string value;
  while (true) {
    if (try_read(path, key, &value)) return value;
    if (deadline.expired())
      throw_timeout(describe_wait({key}, {key}, timeout) + where());
    backoff_sleep(&step, deadline);
  }
}

std::int64_t FileStore::add(const std::string& key, std::int64_t delta) {
  const std::string lock_path = dir_ + "/.lock";
  UniqueFd lock(::open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600));
  if (!lock.valid()) throw_io("file store: open " + lock_path, errno);
  // Non-blocking attempts with a backoff, so a holder frozen by SIGSTOP
  // costs a Timeout, not a hang.
  Deadline deadline(lock_timeout_);
  Millis step = kMinPoll;
  while (::flock(lock.get(), LOCK_EX | LOCK_NB) != 0) {
    if (errno != EWOULDBLOCK && errno != EINTR) throw_io("file store: flock " + lock_path, errno);
    if (deadline.expired()) {
      throw_timeout("file store: add(" + printable_key(key) + ") could not take the lock " + lock_path +
                    " within " + std::to_string(lock_timeout_.count()) +
                    " ms (another rank holds it)");
    }
    backoff_sleep(&step, deadline);
  }
  // The lock is released when `lock` is closed, on return or throw.
  const std::string path = path_for(key);
  std::string current;
  std::int64_t value = 0;
  if (try_read(path, key, &current) && !parse_counter(current, &value)) {
    throw_invalid_argument("file store: add(" + printable_key(key) + "): the value is not an integer");
  }
  value += delta;
  write_atomically(path, std::to_string(value), key);
  return value;
}

std::vector<std::string> FileStore::absent_now(const std::vector<std::string>& keys) const {
  std::vector<std::string> out;
  for (const auto& k : keys) {
    const std::string path = path_for(k);
    if (::access(path.c_str(), F_OK) != 0) {
      if (errno != ENOENT)
        throw_io("file store: access " + path + " for key " + printable_key(k), errno);
      out.push_back(k);
    }
  }
  return out;
}

std::vector<std::string> FileStore::missing(const std::vector<std::string>& keys, Millis timeout) {
  Deadline deadline(timeout);
  Millis step = kMinPoll;
  while (true) {
    auto absent = absent_now(keys);
    if (absent.empty() || deadline.expired()) return absent;
    backoff_sleep(&step, deadline);
  }
}

std::string FileStore::where() const { return " in " + dir_; }

bool FileStore::remove(const std::string& key) {
  const std::string path = path_for(key);
  if (::unlink(path.c_str()) == 0) return true;
  if (errno == ENOENT) return false;
  throw_io("file store: unlink " + path + " for key " + printable_key(key), errno);
}

}  // namespace hpct::store
