#include "c10d_store.h"

#include <algorithm>
#include <thread>

#include "core/error.h"

namespace hpct::py {

C10dStore::C10dStore(c10::intrusive_ptr<c10d::Store> inner, std::string where)
    : inner_(std::move(inner)), where_(std::move(where)) {}

void C10dStore::set(const std::string& key, const std::string& value) {
  inner_->set(key, std::vector<std::uint8_t>(value.begin(), value.end()));
}

std::string C10dStore::get(const std::string& key, Millis timeout) {
  if (!missing({key}, timeout).empty()) {
    throw_timeout("waited " + std::to_string(timeout.count()) + " ms for key " + key + where() +
                  " (a rank that has not reached init_process_group, or died before it)");
  }
  const std::vector<std::uint8_t> v = inner_->get(key);
  return std::string(v.begin(), v.end());
}

std::int64_t C10dStore::add(const std::string& key, std::int64_t delta) { return inner_->add(key, delta); }

std::vector<std::string> C10dStore::missing(const std::vector<std::string>& keys, Millis timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  auto pause = std::chrono::milliseconds(5);
  for (;;) {
    std::vector<std::string> absent;
    for (const auto& k : keys) {
      if (!inner_->check({k})) absent.push_back(k);
    }
    if (absent.empty() || std::chrono::steady_clock::now() >= deadline) return absent;
    std::this_thread::sleep_for(std::min<Millis>(
        pause, std::chrono::duration_cast<Millis>(deadline - std::chrono::steady_clock::now())));
    pause = std::min(pause * 2, std::chrono::milliseconds(50));
  }
}

bool C10dStore::remove(const std::string& key) { return inner_->deleteKey(key); }

}  // namespace hpct::py
