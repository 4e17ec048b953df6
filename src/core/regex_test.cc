#include "core/regex.h"

#include <gtest/gtest.h>

#include "core/error.h"

namespace hpct {
namespace {

TEST(RegexTest, SearchGivesPositionAndGroupsWithUnmatchedOnesEmpty) {
  const Regex re(R"(peer rank (\d+)|rank (\d+) \(pid)");
  const auto m = re.search("lost: rank 7 (pid 123) exited");
  ASSERT_TRUE(m.has_value());
  EXPECT_EQ(m->position, 6u);
  ASSERT_EQ(m->groups.size(), 3u);
  EXPECT_FALSE(m->groups[1].has_value());
  EXPECT_EQ(m->group(1), "");
  EXPECT_EQ(m->group(2), "7");
  EXPECT_FALSE(re.search("nothing here").has_value());
}

TEST(RegexTest, SearchAllAndWholeMatch) {
  const Regex num(R"(\d+)");
  const auto all = num.search_all("ranks [1, 22, 3]");
  ASSERT_EQ(all.size(), 3u);
  EXPECT_EQ(all[1].group(0), "22");
  EXPECT_EQ(all[2].position, 14u);
  const Regex ckpt(R"(ckpt-\d+\.json)");
  EXPECT_TRUE(ckpt.matches("ckpt-12.json"));
  EXPECT_FALSE(ckpt.matches("old-ckpt-12.json"));
}

TEST(RegexTest, ABadPatternIsAnInvalidArgumentNamingIt) {
  try {
    Regex bad("(unclosed");
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("(unclosed"), std::string::npos);
  }
}

}  // namespace
}  // namespace hpct
