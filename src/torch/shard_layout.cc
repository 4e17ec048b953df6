// The partition of include/hpctrain/shard_layout.h.
#include "hpctrain/shard_layout.h"

#include <algorithm>
#include <set>

#include "core/error.h"

namespace hpct {

ShardLayout::ShardLayout(std::vector<std::pair<std::string, std::int64_t>> params, int world_size)
    : params_(std::move(params)), world_size_(world_size) {
  if (world_size < 1) throw_invalid_argument("shard layout: world size " + std::to_string(world_size) + " < 1");
  std::set<std::string> seen;
  offsets_.reserve(params_.size() + 1);
  offsets_.push_back(0);
  for (const auto& [name, numel] : params_) {
    if (name.empty()) throw_invalid_argument("shard layout: a parameter without a name");
    if (!seen.insert(name).second) throw_invalid_argument("shard layout: parameter " + name + " twice");
    if (numel < 0) throw_invalid_argument("shard layout: parameter " + name + " has a negative size");
    total_ += numel;
    offsets_.push_back(total_);
  }
}

std::int64_t ShardLayout::begin(int rank) const {
  if (rank <= 0) return 0;
  if (rank >= world_size_) return total_;
  // total * rank fits int64 for any model that fits memory (< 2^63 / 2^20).
  const std::int64_t even = total_ * rank / world_size_;
  return std::min(total_, even - even % kAlign);
}

std::int64_t ShardLayout::end(int rank) const { return rank >= world_size_ - 1 ? total_ : begin(rank + 1); }

std::vector<ShardPiece> ShardLayout::owned_pieces(int rank) const {
  std::vector<ShardPiece> out;
  const std::int64_t b = begin(rank), e = end(rank);
  if (b >= e) return out;
  // The first parameter whose end is past b.
  auto it = std::upper_bound(offsets_.begin() + 1, offsets_.end(), b);
  for (auto i = static_cast<std::size_t>(it - offsets_.begin() - 1); i < params_.size(); ++i) {
    const std::int64_t ps = offsets_[i], pe = offsets_[i + 1];
    if (ps >= e) break;
    const std::int64_t s = std::max(ps, b), t = std::min(pe, e);
    if (s >= t) continue;  // an empty parameter
    out.push_back(ShardPiece{params_[i].first, s - ps, t - s, s, i});
  }
  return out;
}

int ShardLayout::owner(std::int64_t flat_element) const {
  if (flat_element < 0 || flat_element >= total_) {
    throw_invalid_argument("shard layout: element " + std::to_string(flat_element) + " outside [0, " +
                           std::to_string(total_) + ")");
  }
  // begin() is monotone in rank: binary search for the last rank starting at or before it.
  int lo = 0, hi = world_size_ - 1;
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (begin(mid) <= flat_element) {
      lo = mid;
    } else {
      hi = mid - 1;
    }
  }
  // lo + 1 starts past e (or lo is the last rank), so lo's range holds e.
  return lo;
}

}  // namespace hpct
