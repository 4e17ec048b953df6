// DistributedSampler with PyTorch's semantics (torch/utils/data/distributed.py).
#include <ATen/CPUGeneratorImpl.h>
#include <torch/torch.h>

#include "core/error.h"
#include "hpctrain/hpctrain.h"

namespace hpct {

DistributedSampler::DistributedSampler(std::size_t dataset_size, int num_replicas, int rank,
                                       bool shuffle, std::uint64_t seed, bool drop_last)
    : dataset_size_(dataset_size),
      num_replicas_(num_replicas),
      rank_(rank),
      shuffle_(shuffle),
      seed_(seed),
      drop_last_(drop_last) {
  if (num_replicas < 1 || rank < 0 || rank >= num_replicas) {
    throw_invalid_argument("DistributedSampler: rank " + std::to_string(rank) +
                           " is not in [0, " + std::to_string(num_replicas) + ")");
  }
  build();
}

DistributedSampler::DistributedSampler(std::size_t dataset_size, const Context& ctx, bool shuffle,
                                       std::uint64_t seed, bool drop_last)
    : DistributedSampler(dataset_size, ctx.size(), ctx.rank(), shuffle, seed, drop_last) {}

void DistributedSampler::set_epoch(std::uint64_t epoch) {
  epoch_ = epoch;
  build();
}

void DistributedSampler::build() {
  const std::size_t n = dataset_size_;
  const std::size_t r = static_cast<std::size_t>(num_replicas_);
  if (drop_last_ && n % r != 0) {
    num_samples_ = (n - r + r - 1) / r;  // ceil((n - r) / r)
    if (n < r) num_samples_ = 0;
  } else {
    num_samples_ = (n + r - 1) / r;
  }
  const std::size_t total = num_samples_ * r;
  std::vector<std::size_t> all;
  all.reserve(std::max(n, total));
  if (shuffle_) {
    auto gen = at::detail::createCPUGenerator(seed_ + epoch_);
    auto perm = torch::randperm(static_cast<std::int64_t>(n), gen, torch::kLong);
    const auto* p = perm.data_ptr<std::int64_t>();
    for (std::size_t i = 0; i < n; ++i) all.push_back(static_cast<std::size_t>(p[i]));
  } else {
    for (std::size_t i = 0; i < n; ++i) all.push_back(i);
  }
  if (!drop_last_) {
    for (std::size_t i = 0; all.size() < total && n > 0; i = (i + 1) % n) all.push_back(all[i]);
  } else {
    all.resize(total);
  }
  indices_.clear();
  for (std::size_t i = static_cast<std::size_t>(rank_); i < total; i += r) indices_.push_back(all[i]);
  position_ = 0;
}

void DistributedSampler::reset(c10::optional<std::size_t> new_size) {
  if (new_size) dataset_size_ = *new_size;
  build();
}

c10::optional<std::vector<std::size_t>> DistributedSampler::next(std::size_t batch_size) {
  if (position_ >= indices_.size()) return c10::nullopt;
  std::size_t end = std::min(indices_.size(), position_ + batch_size);
  std::vector<std::size_t> out(indices_.begin() + static_cast<std::ptrdiff_t>(position_),
                               indices_.begin() + static_cast<std::ptrdiff_t>(end));
  position_ = end;
  return out;
}

void DistributedSampler::save(torch::serialize::OutputArchive& archive) const {
  archive.write("epoch", torch::tensor({static_cast<std::int64_t>(epoch_)}, torch::kLong),
                /*is_buffer=*/true);
  archive.write("position", torch::tensor({static_cast<std::int64_t>(position_)}, torch::kLong),
                /*is_buffer=*/true);
}

void DistributedSampler::load(torch::serialize::InputArchive& archive) {
  torch::Tensor epoch = torch::empty({1}, torch::kLong);
  torch::Tensor position = torch::empty({1}, torch::kLong);
  archive.read("epoch", epoch, /*is_buffer=*/true);
  archive.read("position", position, /*is_buffer=*/true);
  set_epoch(static_cast<std::uint64_t>(epoch.item<std::int64_t>()));
  position_ = static_cast<std::size_t>(position.item<std::int64_t>());
}

}  // namespace hpct
