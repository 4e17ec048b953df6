#include "core/units.h"

#include <gtest/gtest.h>

#include "core/error.h"

namespace hpct {
namespace {

TEST(Units, ParsesSuffixes) {
  EXPECT_EQ(parse_bytes("4096"), 4096u);
  EXPECT_EQ(parse_bytes("4K"), 4096u);
  EXPECT_EQ(parse_bytes("1m"), 1u << 20);
  EXPECT_EQ(parse_bytes("256MiB"), 256u << 20);
  EXPECT_EQ(parse_bytes("1.5K"), 1536u);
  EXPECT_THROW(parse_bytes("12Q"), Error);
  EXPECT_THROW(parse_bytes("big"), Error);
}

TEST(Units, RangesAndLists) {
  auto r = parse_byte_sizes("4K..256K");
  ASSERT_EQ(r.size(), 4u);  // 4K 16K 64K 256K
  EXPECT_EQ(r.back(), 256u << 10);
  auto l = parse_byte_sizes("1M,3M");
  EXPECT_EQ(l, (std::vector<std::uint64_t>{1u << 20, 3u << 20}));
  EXPECT_THROW(parse_byte_sizes("256K..4K"), Error);
  EXPECT_EQ(format_bytes(4096), "4K");
}

}  // namespace
}  // namespace hpct
