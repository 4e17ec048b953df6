#include "core/env.h"

#include <unistd.h>  // environ

#include <cstdlib>
#include <cstring>

namespace hpct {

std::optional<std::string> ProcessEnv::get(const std::string& name) const {
  const char* v = std::getenv(name.c_str());
  if (v == nullptr) return std::nullopt;
  return std::string(v);
}

std::map<std::string, std::string> ProcessEnv::with_prefix(const std::string& prefix) const {
  std::map<std::string, std::string> out;
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
    const char* eq = std::strchr(*e, '=');
    if (eq == nullptr) continue;
    std::string name(*e, eq - *e);
    if (name.compare(0, prefix.size(), prefix) == 0) out[name] = eq + 1;
  }
  return out;
}

std::optional<std::string> MapEnv::get(const std::string& name) const {
  auto it = vars_.find(name);
  if (it == vars_.end()) return std::nullopt;
  return it->second;
}

std::map<std::string, std::string> MapEnv::with_prefix(const std::string& prefix) const {
  std::map<std::string, std::string> out;
  for (const auto& [k, v] : vars_) {
    if (k.compare(0, prefix.size(), prefix) == 0) out[k] = v;
  }
  return out;
}

}  // namespace hpct
