// A store in this process's memory: for ranks that live as threads of one
// process (tests, and the in-process benchmarks).
#pragma once

#include <condition_variable>
#include <map>
#include <mutex>

#include "store/store.h"

namespace hpct::store {

class MemoryStore final : public Store {
 public:
  MemoryStore() = default;
  MemoryStore(const MemoryStore&) = delete;
  MemoryStore& operator=(const MemoryStore&) = delete;

  void set(const std::string& key, const std::string& value) override;
  std::string get(const std::string& key, Millis timeout) override;
  std::int64_t add(const std::string& key, std::int64_t delta) override;
  std::vector<std::string> missing(const std::vector<std::string>& keys, Millis timeout) override;
  bool remove(const std::string& key) override;

 private:
  std::vector<std::string> missing_locked(const std::vector<std::string>& keys) const;

  std::mutex mu_;
  std::condition_variable changed_;
  std::map<std::string, std::string> data_;  // guarded by mu_
};

}  // namespace hpct::store
