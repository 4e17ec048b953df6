#include "comm/gloo/store_adapter.h"

namespace hpct::comm {

GlooStoreAdapter::GlooStoreAdapter(std::shared_ptr<store::Store> store, Millis default_timeout)
    : store_(std::move(store)), default_timeout_(default_timeout) {}

std::vector<std::string> GlooStoreAdapter::store_keys(const std::vector<std::string>& keys) const {
  std::vector<std::string> out;
  out.reserve(keys.size());
  for (const auto& k : keys) out.push_back(store_key(k));
  return out;
}

void GlooStoreAdapter::set(const std::string& key, const std::vector<char>& data) {
  store_->set(store_key(key), std::string(data.begin(), data.end()));
}

std::vector<char> GlooStoreAdapter::get(const std::string& key) {
  const std::string v = store_->get(store_key(key), default_timeout_);
  return std::vector<char>(v.begin(), v.end());
}

void GlooStoreAdapter::wait(const std::vector<std::string>& keys) {
  store_->wait(store_keys(keys), default_timeout_);
}

void GlooStoreAdapter::wait(const std::vector<std::string>& keys,
                            const std::chrono::milliseconds& timeout) {
  // Gloo passes its context timeout here; a non-positive one would mean "no
  // bound" to some callers, which we never allow.
  store_->wait(store_keys(keys), timeout.count() > 0 ? timeout : default_timeout_);
}

}  // namespace hpct::comm
