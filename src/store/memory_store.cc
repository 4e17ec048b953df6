#include "store/memory_store.h"

#include "core/error.h"

namespace hpct::store {

void MemoryStore::set(const std::string& key, const std::string& value) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    data_[key] = value;
  }
  changed_.notify_all();
}

std::string MemoryStore::get(const std::string& key, Millis timeout) {
  wait({key}, timeout);
  std::lock_guard<std::mutex> lock(mu_);
  auto it = data_.find(key);
  if (it == data_.end()) {
    // Removed between the wait and now: report it as the wait it was.
    throw_timeout(describe_wait({key}, {key}, timeout));
  }
  return it->second;
}

std::int64_t MemoryStore::add(const std::string& key, std::int64_t delta) {
  std::int64_t result;
  {
    std::lock_guard<std::mutex> lock(mu_);
    std::string& v = data_[key];
    std::int64_t current = 0;
    if (!parse_counter(v, &current)) {
      throw_invalid_argument("add(" + printable_key(key) + "): the value at the store is not an integer");
    }
    result = current + delta;
    v = std::to_string(result);
  }
  changed_.notify_all();
  return result;
}

std::vector<std::string> MemoryStore::missing_locked(const std::vector<std::string>& keys) const {
  std::vector<std::string> missing;
  for (const auto& k : keys) {
    if (data_.find(k) == data_.end()) missing.push_back(k);
  }
  return missing;
}

std::vector<std::string> MemoryStore::missing(const std::vector<std::string>& keys, Millis timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  const auto deadline = SteadyClock::now() + timeout;
  while (true) {
    auto absent = missing_locked(keys);
    if (absent.empty() || changed_.wait_until(lock, deadline) == std::cv_status::timeout) {
      return absent.empty() ? absent : missing_locked(keys);
    }
  }
}

bool MemoryStore::remove(const std::string& key) {
  std::lock_guard<std::mutex> lock(mu_);
  return data_.erase(key) > 0;
}

}  // namespace hpct::store
