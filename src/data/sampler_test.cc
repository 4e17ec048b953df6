// The epoch plan: every sample to exactly one rank, padding counted,
// deterministic per seed, different per epoch; and the shuffle buffer.
#include "data/sampler.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <set>

#include "data/shuffle_buffer.h"

namespace hpct::data {
namespace {

TEST(ShuffleBuffer, PermutesDeterministicallyWithinItsWindow) {
  std::vector<int> in(1000);
  for (int i = 0; i < 1000; ++i) in[i] = i;
  auto a = shuffle_stream(in, 50, 10, Rng(1));
  auto b = shuffle_stream(in, 50, 10, Rng(1));
  auto c = shuffle_stream(in, 50, 10, Rng(2));
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c);
  EXPECT_NE(a, in);
  auto sorted = a;
  std::sort(sorted.begin(), sorted.end());
  EXPECT_EQ(sorted, in);
  // An item leaves at most capacity + a few positions before it entered.
  for (size_t i = 0; i < a.size(); ++i) EXPECT_LT(a[i], static_cast<int>(i) + 60);
  EXPECT_EQ(shuffle_stream(in, 1, 1, Rng(3)), in);
}

TEST(Sampler, RanksPartitionTheDatasetWithCountedPadding) {
  const std::vector<std::uint64_t> shards = {7, 0, 13, 5, 9};  // 34 samples, one empty shard
  for (int size : {1, 2, 3, 4}) {
    for (bool drop_last : {false, true}) {
      std::map<std::uint64_t, int> seen;
      std::uint64_t padded = 0, dropped = 0;
      size_t per_rank = 0;
      for (int rank = 0; rank < size; ++rank) {
        SplitOptions o;
        o.rank = rank;
        o.size = size;
        o.seed = 42;
        o.shuffle_buffer = 8;
        o.shuffle_initial = 3;
        o.drop_last = drop_last;
        RankPlan p = plan_epoch(shards, o, 3);
        if (rank == 0) per_rank = p.order.size();
        EXPECT_EQ(p.order.size(), per_rank) << "every rank gets as many samples";
        for (auto id : p.order) ++seen[id];
        padded += p.padded;
        dropped = p.dropped;
      }
      std::uint64_t extra = 0;
      for (auto& [id, n] : seen) {
        EXPECT_LT(id, 34u);
        extra += static_cast<std::uint64_t>(n - 1);
      }
      if (drop_last) {
        EXPECT_EQ(extra, 0u);
        EXPECT_EQ(seen.size() + dropped, 34u) << size;
        EXPECT_EQ(per_rank, 34u / size);
      } else {
        EXPECT_EQ(seen.size(), 34u) << "size " << size;
        EXPECT_EQ(extra, padded) << "the only repeats are the counted padding";
        EXPECT_EQ(padded, per_rank * size - 34);
      }
    }
  }
}

TEST(Sampler, SameSeedSameOrderOtherEpochOtherOrder) {
  const std::vector<std::uint64_t> shards(10, 100);
  SplitOptions o;
  o.rank = 1;
  o.size = 2;
  o.seed = 7;
  auto a = plan_epoch(shards, o, 0), b = plan_epoch(shards, o, 0), c = plan_epoch(shards, o, 1);
  EXPECT_EQ(a.order, b.order);
  EXPECT_EQ(a.shard_order, b.shard_order);
  EXPECT_NE(a.order, c.order);
  o.seed = 8;
  EXPECT_NE(plan_epoch(shards, o, 0).order, a.order);
  o.shuffle = false;
  auto plain = plan_epoch(shards, o, 5);
  ASSERT_EQ(plain.order.size(), 500u);
  for (size_t i = 0; i < 500; ++i) EXPECT_EQ(plain.order[i], 500 + i);
  EXPECT_EQ(batch_count(10, 4, false), 3);
  EXPECT_EQ(batch_count(10, 4, true), 2);
}

// An elastic epoch: 3 ranks for 4 steps, then 2 for 5, then 4 to the end.
// Whatever the sizes, the job consumes a prefix of one permutation: no
// sample twice, none skipped but the last partial global batch.
TEST(Sampler, ElasticSplitNeverRepeatsOrSkipsWhenTheWorldChanges) {
  const std::vector<std::uint64_t> shards = {40, 0, 77, 33, 100};  // 250 samples
  const std::int64_t batch = 5;
  std::set<std::uint64_t> seen;
  std::uint64_t consumed = 0;
  auto run_steps = [&](int size, int steps) {
    std::vector<RankPlan> plans;
    for (int r = 0; r < size; ++r) {
      SplitOptions o;
      o.rank = r;
      o.size = size;
      o.seed = 11;
      plans.push_back(plan_epoch_elastic(shards, o, 2, consumed, batch));
    }
    const int available = static_cast<int>(plans[0].order.size() / batch);
    const int n = steps < 0 ? available : std::min(steps, available);
    for (int j = 0; j < n; ++j) {
      for (int r = 0; r < size; ++r) {
        for (std::int64_t i = 0; i < batch; ++i) {
          EXPECT_TRUE(seen.insert(plans[r].order[j * batch + i]).second) << "sample seen twice";
        }
      }
      consumed += static_cast<std::uint64_t>(size * batch);
    }
    return plans[0].dropped;
  };
  run_steps(3, 4);
  run_steps(2, 5);
  const std::uint64_t dropped = run_steps(4, -1);
  EXPECT_EQ(consumed, 60u + 50u + 140u);
  EXPECT_EQ(dropped, 0u);
  EXPECT_EQ(seen.size(), 250u);
  for (std::uint64_t id : seen) EXPECT_LT(id, 250u);

  // The same position gives the same split; another epoch another order.
  SplitOptions o;
  o.seed = 11;
  o.size = 2;
  auto a = plan_epoch_elastic(shards, o, 2, 30, batch);
  auto b = plan_epoch_elastic(shards, o, 2, 30, batch);
  auto c = plan_epoch_elastic(shards, o, 3, 30, batch);
  EXPECT_EQ(a.order, b.order);
  EXPECT_NE(a.order, c.order);
  EXPECT_EQ(a.order.size(), 110u);  // 220 left, 22 global batches of 10, 11 of them this rank's
  EXPECT_EQ(a.dropped, 0u);
  EXPECT_EQ(plan_epoch_elastic(shards, o, 2, 247, batch).dropped, 3u);
}

}  // namespace
}  // namespace hpct::data
