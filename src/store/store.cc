#include "store/store.h"

namespace hpct::store {

PrefixStore::PrefixStore(std::string prefix, std::shared_ptr<Store> inner)
    : prefix_(std::move(prefix)), inner_(std::move(inner)) {}

std::vector<std::string> PrefixStore::full(const std::vector<std::string>& keys) const {
  std::vector<std::string> out;
  out.reserve(keys.size());
  for (const auto& k : keys) out.push_back(full(k));
  return out;
}

void PrefixStore::set(const std::string& key, const std::string& value) { inner_->set(full(key), value); }
std::string PrefixStore::get(const std::string& key, Millis timeout) { return inner_->get(full(key), timeout); }
std::int64_t PrefixStore::add(const std::string& key, std::int64_t delta) { return inner_->add(full(key), delta); }
void PrefixStore::wait(const std::vector<std::string>& keys, Millis timeout) { inner_->wait(full(keys), timeout); }
bool PrefixStore::check(const std::vector<std::string>& keys) { return inner_->check(full(keys)); }
bool PrefixStore::remove(const std::string& key) { return inner_->remove(full(key)); }

std::string describe_wait(const std::vector<std::string>& keys,
                          const std::vector<std::string>& missing, Millis timeout) {
  auto join = [](const std::vector<std::string>& v) {
    std::string s;
    for (size_t i = 0; i < v.size() && i < 16; ++i) s += (i ? ", " : "") + v[i];
    if (v.size() > 16) s += ", ... (" + std::to_string(v.size()) + " in all)";
    return s;
  };
  return "timed out after " + std::to_string(timeout.count()) + " ms waiting for store keys [" +
         join(keys) + "] (missing: " + join(missing) + ")";
}

}  // namespace hpct::store
