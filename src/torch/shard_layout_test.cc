// The shard layout every rank computes alike: ranges cover the flat vector
// exactly once, are near-equal, start on kAlign boundaries, and the pieces
// map back to the parameters.
#include "hpctrain/shard_layout.h"

#include <gtest/gtest.h>

#include "core/error.h"

namespace hpct {
namespace {

TEST(ShardLayout, RangesCoverEveryElementOnceNearEqually) {
  for (int n : {1, 2, 3, 4, 7}) {
    ShardLayout l({{"a.weight", 1000}, {"a.bias", 3}, {"empty", 0}, {"b.weight", 517}}, n);
    ASSERT_EQ(l.total(), 1520);
    std::int64_t next = 0;
    for (int r = 0; r < n; ++r) {
      EXPECT_EQ(l.begin(r), next) << "rank " << r;
      if (r > 0) {
        EXPECT_EQ(l.begin(r) % ShardLayout::kAlign, 0) << "rank " << r;
      }
      EXPECT_LE(std::abs(l.count(r) - l.total() / n), ShardLayout::kAlign + 1) << "rank " << r << " of " << n;
      std::int64_t in_pieces = 0;
      for (const auto& p : l.owned_pieces(r)) {
        EXPECT_GT(p.numel, 0);
        EXPECT_EQ(p.flat_offset, l.param_offset(p.param_index) + p.offset);
        EXPECT_EQ(l.params()[p.param_index].first, p.name);
        EXPECT_LE(p.offset + p.numel, l.params()[p.param_index].second);
        EXPECT_EQ(l.owner(p.flat_offset), r);
        EXPECT_EQ(l.owner(p.flat_offset + p.numel - 1), r);
        in_pieces += p.numel;
      }
      EXPECT_EQ(in_pieces, l.count(r));
      next = l.end(r);
    }
    EXPECT_EQ(next, l.total());
  }
}

TEST(ShardLayout, AParameterStraddlingRanksIsSplitIntoPieces) {
  ShardLayout l({{"w", 64}, {"b", 32}}, 2);  // 96 elements: rank 0 [0, 48), rank 1 [48, 96)
  auto p0 = l.owned_pieces(0), p1 = l.owned_pieces(1);
  ASSERT_EQ(p0.size(), 1u);
  EXPECT_EQ(p0[0].name, "w");
  EXPECT_EQ(p0[0].numel, 48);
  ASSERT_EQ(p1.size(), 2u);
  EXPECT_EQ(p1[0].name, "w");
  EXPECT_EQ(p1[0].offset, 48);
  EXPECT_EQ(p1[0].numel, 16);
  EXPECT_EQ(p1[1].name, "b");
  EXPECT_EQ(p1[1].offset, 0);
  EXPECT_EQ(p1[1].numel, 32);
}

TEST(ShardLayout, SmallModelsLeaveSomeRanksEmpty) {
  ShardLayout l({{"w", 20}}, 4);
  std::int64_t sum = 0;
  for (int r = 0; r < 4; ++r) sum += l.count(r);
  EXPECT_EQ(sum, 20);
  EXPECT_TRUE(l.owned_pieces(1).empty());
  EXPECT_EQ(l.owner(19), 3);
}

TEST(ShardLayout, RefusesBadInput) {
  EXPECT_THROW(ShardLayout({{"w", 4}}, 0), Error);
  EXPECT_THROW(ShardLayout({{"w", 4}, {"w", 4}}, 2), Error);
  EXPECT_THROW(ShardLayout({{"", 4}}, 2), Error);
  EXPECT_THROW(ShardLayout({{"w", 4}}, 2).owner(4), Error);
}

}  // namespace
}  // namespace hpct
