#include "core/config.h"

#include <gtest/gtest.h>

#include "core/error.h"

namespace hpct {
namespace {

TEST(Config, DefaultsWhenEnvironmentIsEmpty) {
  Config c = Config::from_env(MapEnv());
  EXPECT_DOUBLE_EQ(c.timeout_s, 300.0);
  EXPECT_EQ(c.backend, "auto");
  EXPECT_TRUE(c.mpi_yield);
  for (const auto& e : c.describe()) EXPECT_EQ(e.source, ConfigSource::kDefault) << e.env_name;
}

TEST(Config, ReadsTypedValuesFromEnvironment) {
  Config c = Config::from_env(MapEnv({{"HPCT_TIMEOUT_S", "2.5"},
                                      {"HPCT_BACKEND", "gloo"},
                                      {"HPCT_MPI_YIELD", "off"},
                                      {"HPCT_MAX_FRAME_BYTES", "1024"}}));
  EXPECT_DOUBLE_EQ(c.timeout_s, 2.5);
  EXPECT_EQ(c.backend, "gloo");
  EXPECT_FALSE(c.mpi_yield);
  EXPECT_EQ(c.max_frame_bytes, 1024);
  EXPECT_EQ(c.sources.at("HPCT_TIMEOUT_S"), ConfigSource::kEnv);
}

TEST(Config, FlagOverridesEnvironmentByEitherName) {
  Config c = Config::from_env(MapEnv({{"HPCT_TIMEOUT_S", "10"}}));
  c.set("--timeout-s", "20", ConfigSource::kFlag);
  EXPECT_DOUBLE_EQ(c.timeout_s, 20);
  c.set("HPCT_TIMEOUT_S", "30", ConfigSource::kFlag);
  EXPECT_DOUBLE_EQ(c.timeout_s, 30);
  EXPECT_EQ(c.sources.at("HPCT_TIMEOUT_S"), ConfigSource::kFlag);
}

TEST(Config, MalformedValueNamesVariableAndValue) {
  try {
    Config::from_env(MapEnv({{"HPCT_TIMEOUT_S", "ten"}}));
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("HPCT_TIMEOUT_S=ten"), std::string::npos) << e.what();
  }
  EXPECT_THROW(Config::from_env(MapEnv({{"HPCT_MPI_YIELD", "maybe"}})), Error);
}

TEST(Config, UnknownVariableIsReportedWithNearestName) {
  Config c = Config::from_env(MapEnv({{"HPCT_TIMOUT_S", "5"}, {"HPCT_RANK", "0"}}));
  ASSERT_EQ(c.unknown_env.size(), 1u);  // HPCT_RANK is a job variable, not a typo
  auto w = c.unknown_env_warnings();
  ASSERT_EQ(w.size(), 1u);
  EXPECT_NE(w[0].find("did you mean HPCT_TIMEOUT_S"), std::string::npos) << w[0];
}

TEST(Config, UnknownSettingIsRefused) {
  Config c;
  EXPECT_THROW(c.set("--no-such-thing", "1", ConfigSource::kFlag), Error);
}

TEST(Config, DescribeListsEveryParameterWithDoc) {
  Config c;
  auto entries = c.describe();
  EXPECT_GE(entries.size(), 8u);
  for (const auto& e : entries) {
    EXPECT_EQ(e.env_name.rfind("HPCT_", 0), 0u);
    EXPECT_FALSE(e.doc.empty()) << e.env_name;
    EXPECT_EQ(e.flag_name.rfind("--", 0), 0u);
  }
}

}  // namespace
}  // namespace hpct
