#include "core/log.h"

#include <gtest/gtest.h>

#include <vector>

namespace hpct {
namespace {

TEST(Log, EveryLineCarriesRankLevelAndSubsystem) {
  std::vector<std::string> lines;
  Logger log(LogLevel::kInfo, "all", 3, [&](const std::string& l) { lines.push_back(l); });
  log.warn("comm", "peer 1 is slow");
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_NE(lines[0].find("rank 3"), std::string::npos) << lines[0];
  EXPECT_NE(lines[0].find(" W comm] peer 1 is slow\n"), std::string::npos) << lines[0];
}

TEST(Log, LevelAndSubsystemFilter) {
  std::vector<std::string> lines;
  Logger log(LogLevel::kDebug, "store,engine", 0, [&](const std::string& l) { lines.push_back(l); });
  log.debug("store", "kept");
  log.debug("comm", "dropped: subsystem not chosen");
  log.log(LogLevel::kTrace, "store", "dropped: below level");
  log.warn("comm", "kept: warnings always pass the subsystem filter");
  EXPECT_EQ(lines.size(), 2u);
}

TEST(Log, ParseLevel) {
  EXPECT_EQ(parse_log_level("debug"), LogLevel::kDebug);
  EXPECT_THROW(parse_log_level("loud"), std::exception);
}

}  // namespace
}  // namespace hpct
