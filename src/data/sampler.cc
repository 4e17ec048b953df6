#include "data/sampler.h"

#include <numeric>

#include "core/error.h"
#include "data/random.h"
#include "data/shuffle_buffer.h"

namespace hpct::data {

RankPlan plan_epoch(const std::vector<std::uint64_t>& shard_samples, const SplitOptions& o,
                    std::int64_t epoch) {
  if (o.size < 1 || o.rank < 0 || o.rank >= o.size) {
    throw_invalid_argument("data split: rank " + std::to_string(o.rank) + " of " +
                           std::to_string(o.size) + " is not a rank");
  }
  RankPlan plan;
  plan.shard_order.resize(shard_samples.size());
  std::iota(plan.shard_order.begin(), plan.shard_order.end(), 0u);
  std::vector<std::uint64_t> first(shard_samples.size() + 1, 0);
  for (size_t i = 0; i < shard_samples.size(); ++i) first[i + 1] = first[i] + shard_samples[i];
  const std::uint64_t n = first.back();
  plan.dataset_samples = n;

  Rng rng = Rng::from({o.seed, static_cast<std::uint64_t>(epoch), 0x5348415244ull});  // "SHARD"
  if (o.shuffle) {
    for (size_t i = plan.shard_order.size(); i > 1; --i) {
      std::swap(plan.shard_order[i - 1], plan.shard_order[rng.below(i)]);
    }
  }
  const std::uint64_t world = static_cast<std::uint64_t>(o.size);
  const std::uint64_t per_rank = o.drop_last ? n / world : (n + world - 1) / world;
  if (n == 0 || per_rank == 0) {
    plan.dropped = n;
    return plan;
  }
  // The global sequence is never built: position p of it is sample
  // seq(p mod n), where seq walks the permuted shards from a random start.
  const std::uint64_t start = o.shuffle ? rng.below(n) : 0;
  const std::uint64_t begin = static_cast<std::uint64_t>(o.rank) * per_rank;
  std::vector<std::uint64_t> slice;
  slice.reserve(per_rank);
  // Find the shard holding sequence position (start + begin) mod n, then walk.
  std::uint64_t pos = (start + begin) % n;
  size_t k = 0;
  std::uint64_t before = 0;  // samples of permuted shards before shard_order[k]
  while (before + shard_samples[plan.shard_order[k]] <= pos) before += shard_samples[plan.shard_order[k++]];
  std::uint64_t within = pos - before;
  for (std::uint64_t i = 0; i < per_rank; ++i) {
    while (within >= shard_samples[plan.shard_order[k]]) {
      within = 0;
      k = (k + 1) % plan.shard_order.size();
    }
    slice.push_back(first[plan.shard_order[k]] + within);
    ++within;
  }
  const std::uint64_t end = begin + per_rank;
  if (!o.drop_last && end > n) plan.padded = std::min(per_rank, end - n);
  plan.dropped = o.drop_last ? n - per_rank * world : 0;
  if (o.shuffle && o.shuffle_buffer > 1) {
    plan.order = shuffle_stream(
        slice, o.shuffle_buffer, o.shuffle_initial,
        Rng::from({o.seed, static_cast<std::uint64_t>(epoch), static_cast<std::uint64_t>(o.rank),
                   0x4255464645ull}));  // "BUFFE"
  } else {
    plan.order = std::move(slice);
  }
  return plan;
}

RankPlan plan_epoch_elastic(const std::vector<std::uint64_t>& shard_samples, const SplitOptions& o,
                            std::int64_t epoch, std::uint64_t consumed, std::int64_t batch) {
  if (o.size < 1 || o.rank < 0 || o.rank >= o.size) {
    throw_invalid_argument("data split: rank " + std::to_string(o.rank) + " of " +
                           std::to_string(o.size) + " is not a rank");
  }
  if (batch < 1) throw_invalid_argument("batch size must be at least 1");
  RankPlan plan;
  std::uint64_t n = 0;
  for (auto c : shard_samples) n += c;
  plan.dataset_samples = n;
  plan.shard_order.resize(shard_samples.size());
  std::iota(plan.shard_order.begin(), plan.shard_order.end(), 0u);
  std::vector<std::uint64_t> seq(n);
  std::iota(seq.begin(), seq.end(), 0ull);
  if (o.shuffle) {
    Rng rng = Rng::from({o.seed, static_cast<std::uint64_t>(epoch), 0x454c415354ull});  // "ELAST"
    for (std::uint64_t i = n; i > 1; --i) std::swap(seq[i - 1], seq[rng.below(i)]);
  }
  const std::uint64_t left = consumed < n ? n - consumed : 0;
  const std::uint64_t global = static_cast<std::uint64_t>(o.size) * static_cast<std::uint64_t>(batch);
  const std::uint64_t steps = left / global;
  plan.dropped = left - steps * global;
  plan.order.reserve(steps * static_cast<std::uint64_t>(batch));
  for (std::uint64_t j = 0; j < steps; ++j) {
    const std::uint64_t at = consumed + j * global + static_cast<std::uint64_t>(o.rank) * static_cast<std::uint64_t>(batch);
    plan.order.insert(plan.order.end(), seq.begin() + static_cast<std::ptrdiff_t>(at),
                      seq.begin() + static_cast<std::ptrdiff_t>(at + static_cast<std::uint64_t>(batch)));
  }
  return plan;
}

std::int64_t batch_count(std::uint64_t samples, std::int64_t batch_size, bool drop_last) {
  if (batch_size < 1) throw_invalid_argument("batch size must be at least 1");
  const auto n = static_cast<std::int64_t>(samples);
  return drop_last ? n / batch_size : (n + batch_size - 1) / batch_size;
}

}  // namespace hpct::data
