// Which samples a rank reads in an epoch, and in what order.
//
// Every rank computes the same global sequence from (seed, epoch): the
// shards in a permuted order, each shard's samples in file order, the whole
// rotated by a random start. The sequence is padded (drop_last off: its
// first samples repeated, as PyTorch's DistributedSampler does) or cut
// (drop_last on) to a multiple of the world size, and rank r takes the r-th
// contiguous slice, so ranks read shards sequentially and every sample goes
// to exactly one rank (padding aside). Each rank then passes its slice
// through a shuffle buffer seeded by (seed, epoch, rank).
//
// Only sample ids move here, never data: a plan for a million samples is a
// few megabytes and milliseconds, which is what makes exact resume and the
// data server's reconnects cheap (the plan is recomputed, not stored).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace hpct::data {

struct SplitOptions {
  int rank = 0;
  int size = 1;
  std::uint64_t seed = 0;
  bool shuffle = true;           // permute shards, rotate, and use the shuffle buffer
  size_t shuffle_buffer = 1000;  // samples held by the shuffle buffer (1: no shuffling)
  size_t shuffle_initial = 100;  // samples gathered before the first one leaves
  bool drop_last = false;        // cut to a multiple of size instead of padding
};

struct RankPlan {
  std::vector<std::uint32_t> shard_order;  // the epoch's shard permutation (same on all ranks)
  std::vector<std::uint64_t> order;        // global sample ids, in delivery order
  std::uint64_t padded = 0;   // entries of order that repeat a sample to even out the ranks
  std::uint64_t dropped = 0;  // samples of the epoch no rank gets (drop_last)
  std::uint64_t dataset_samples = 0;
};

// shard_samples[i]: how many samples shard i holds; global sample ids number
// them shard by shard. InvalidArgument for a bad rank/size.
RankPlan plan_epoch(const std::vector<std::uint64_t>& shard_samples, const SplitOptions& options,
                    std::int64_t epoch);

// Elastic jobs (docs/elastic.md): the world may change size within an
// epoch, so the split is by global batch instead of by rank slice. The
// epoch's global sequence is one permutation of every sample (seed, epoch;
// the identity without shuffle); global step j takes positions
// [consumed + j*size*batch, +size*batch) of it and rank r the r-th `batch`
// of those. What the job consumed is then always a prefix of the sequence,
// and after a change of size the rest is split again over the new world
// from `consumed`: within an epoch no sample is seen twice and none is
// skipped, except the last partial global batch (dropped, as drop_last).
// No shuffle buffer (it would hold samples the job has not consumed).
RankPlan plan_epoch_elastic(const std::vector<std::uint64_t>& shard_samples, const SplitOptions& options,
                            std::int64_t epoch, std::uint64_t consumed, std::int64_t batch);

// Batches a rank gets: ceil(n / batch) or, with drop_last, floor(n / batch).
std::int64_t batch_count(std::uint64_t samples, std::int64_t batch_size, bool drop_last);

}  // namespace hpct::data
