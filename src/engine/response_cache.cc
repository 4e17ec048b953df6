#include "engine/response_cache.h"

namespace hpct::engine {

std::optional<std::size_t> ResponseCache::lookup(const Request& r) const {
  auto it = by_name_.find(r.name);
  if (it == by_name_.end() || !entries_[it->second].same_signature(r)) return std::nullopt;
  return it->second;
}

void ResponseCache::insert(const Request& r) {
  Request stored = r;
  stored.waited_ms = 0;
  auto it = by_name_.find(r.name);
  if (it != by_name_.end()) {
    entries_[it->second] = std::move(stored);
    return;
  }
  if (entries_.size() >= capacity_) return;
  by_name_.emplace(r.name, entries_.size());
  entries_.push_back(std::move(stored));
}

}  // namespace hpct::engine
