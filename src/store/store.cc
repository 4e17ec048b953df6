#include "store/store.h"

#include <charconv>

#include "core/error.h"

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
std::vector<std::string> PrefixStore::missing(const std::vector<std::string>& keys, Millis timeout) {
  const auto absent = inner_->missing(full(keys), timeout);
  std::vector<std::string> out;
  out.reserve(absent.size());
  for (const auto& k : absent) out.push_back(k.substr(prefix_.size() + 1));
  return out;
}
bool PrefixStore::remove(const std::string& key) { return inner_->remove(full(key)); }
void PrefixStore::set_by(const std::string& key, const std::string& value,
                         const Deadline& deadline) {
  inner_->set_by(full(key), value, deadline);
}
std::optional<std::string> PrefixStore::peek_by(const std::string& key, const Deadline& deadline) {
  return inner_->peek_by(full(key), deadline);
}

void Store::set_by(const std::string& key, const std::string& value, const Deadline&) {
  set(key, value);
}

std::optional<std::string> Store::peek_by(const std::string& key, const Deadline&) {
  if (!check({key})) return std::nullopt;
  return get(key, Millis(0));
}

void Store::wait(const std::vector<std::string>& keys, Millis timeout) {
  const auto absent = missing(keys, timeout);
  if (!absent.empty()) throw_timeout(describe_wait(keys, absent, timeout) + where());
}

bool parse_counter(const std::string& value, std::int64_t* out) {
  *out = 0;
  if (value.empty()) return true;
  const auto [end, ec] = std::from_chars(value.data(), value.data() + value.size(), *out);
  return ec == std::errc() && end == value.data() + value.size();
}

std::string printable_key(const std::string& key) {
  std::string s;
  for (unsigned char c : key) {
    if (c >= 0x20 && c < 0x7f) {
      s += static_cast<char>(c);
    } else {
      static const char kDigits[] = "0123456789abcdef";
      s += {'\\', 'x', kDigits[c >> 4], kDigits[c & 15]};
    }
  }
  return s;
}

std::string describe_wait(const std::vector<std::string>& keys,
                          const std::vector<std::string>& missing, Millis timeout) {
  auto join = [](const std::vector<std::string>& v) {
    std::string s;
    for (size_t i = 0; i < v.size() && i < 16; ++i) s += (i ? ", " : "") + printable_key(v[i]);
    if (v.size() > 16) s += ", ... (" + std::to_string(v.size()) + " in all)";
    return s;
  };
  return "timed out after " + std::to_string(timeout.count()) + " ms waiting for store keys [" +
         join(keys) + "] (missing: " + join(missing) + ")";
}

}  // namespace hpct::store
