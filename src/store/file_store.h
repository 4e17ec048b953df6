// A store kept in a directory that every rank sees (a local directory for
// ranks on one machine, or NFS for a cluster without a TCP store).
//
// Layout of the directory:
//   k_<encoded key>   one file per key, holding the value's bytes. Keys may
//                     hold any bytes (including '/' and NUL): every byte
//                     outside [A-Za-z0-9_-] is written as %XX. A key whose
//                     encoding would be too long for a file name is stored
//                     as h_<sha256 of the key, hex> instead.
//   .tmp.*            values being written; renamed into place when whole, so
//                     a reader sees the old value or the new, never a part.
//   .lock             flock(2)ed by add() so that read-add-write is atomic
//                     across threads and processes (and hosts, on Linux NFS,
//                     which maps flock to byte-range locks).
//
// get() and wait() poll with a backoff growing from 1 ms to 50 ms until their
// timeout. A FileStore owns nothing but its path; several FileStore objects
// (in one process or many) on the same directory see the same keys.
#pragma once

#include <atomic>
#include <string>

#include "store/store.h"

namespace hpct::store {

class FileStore final : public Store {
 public:
  // Creates dir if it does not exist (its parent must); Io naming dir when it
  // cannot be created or is not a directory. lock_timeout bounds how long
  // add() waits for the lock file (a rank frozen while holding it must not
  // hang the others forever).
  explicit FileStore(std::string dir, Millis lock_timeout = Millis(60000));
  FileStore(const FileStore&) = delete;
  FileStore& operator=(const FileStore&) = delete;

  // All methods are thread-safe and process-safe. set/check/remove do not
  // block beyond file-system calls; get/wait poll until their timeout; add
  // blocks at most lock_timeout for the lock.
  void set(const std::string& key, const std::string& value) override;
  std::string get(const std::string& key, Millis timeout) override;
  std::int64_t add(const std::string& key, std::int64_t delta) override;
  std::vector<std::string> missing(const std::vector<std::string>& keys, Millis timeout) override;
  bool remove(const std::string& key) override;

  const std::string& dir() const { return dir_; }
  std::string where() const override;  // " in DIR"

  // The file name (without the directory) key is stored under; exposed so
  // tests can check that every key maps to one safe name.
  static std::string file_name_for_key(const std::string& key);

 private:
  std::string path_for(const std::string& key) const { return dir_ + "/" + file_name_for_key(key); }
  // Writes value to a temporary file and renames it over path.
  void write_atomically(const std::string& path, const std::string& value, const std::string& key);
  // False when the file does not exist; Io for any other failure.
  bool try_read(const std::string& path, const std::string& key, std::string* value) const;
  std::vector<std::string> absent_now(const std::vector<std::string>& keys) const;

  const std::string dir_;
  const Millis lock_timeout_;
  const std::string tmp_tag_;  // random per object: temp names never collide across hosts
  std::atomic<std::uint64_t> tmp_counter_{0};
};

}  // namespace hpct::store
