// The text format as prometheus-cpp and other exporters write it, and the
// one-line errors for text that is not in it.
#include "metrics/exposition.h"

#include <gtest/gtest.h>

#include <cmath>

#include "core/error.h"

namespace hpct::metrics {
namespace {

TEST(Exposition, ReadsSamplesLabelsEscapesSpecialValuesAndTimestamps) {
  const std::string text =
      "# HELP hpctrain_samples_total Training samples\n"
      "# TYPE hpctrain_samples_total counter\n"
      "hpctrain_samples_total{host=\"10.0.0.2\",launch_id=\"j-1\",rank=\"1\"} 6400\n"
      "\n"
      "hpctrain_step_phase_seconds_bucket{phase=\"sync\",le=\"+Inf\"} 12\r\n"
      "hpctrain_step_phase_seconds_sum{phase=\"sync\"} 0.25 1700000000000\n"
      "odd{path=\"a \\\"quoted\\\" \\\\ path\\nx\",} -Inf\n"
      "  plain_gauge 1.5e-3\n"
      "nan_gauge NaN\n";
  auto samples = parse_exposition(text);
  ASSERT_EQ(samples.size(), 6u);
  EXPECT_EQ(samples[0].name, "hpctrain_samples_total");
  EXPECT_EQ(samples[0].labels.at("rank"), "1");
  EXPECT_EQ(samples[0].labels.at("host"), "10.0.0.2");
  EXPECT_EQ(samples[0].value, 6400);
  EXPECT_TRUE(std::isinf(samples[1].value) == false);
  EXPECT_EQ(samples[1].labels.at("le"), "+Inf");
  EXPECT_EQ(samples[2].value, 0.25);
  EXPECT_EQ(samples[3].labels.at("path"), "a \"quoted\" \\ path\nx");
  EXPECT_TRUE(std::isinf(samples[3].value) && samples[3].value < 0);
  EXPECT_EQ(samples[4].name, "plain_gauge");
  EXPECT_DOUBLE_EQ(samples[4].value, 1.5e-3);
  EXPECT_TRUE(std::isnan(samples[5].value));

  Exposition e(samples);
  EXPECT_EQ(e.value("hpctrain_step_phase_seconds_sum", {{"phase", "sync"}}), 0.25);
  EXPECT_EQ(e.value("hpctrain_step_phase_seconds_sum", {{"phase", "data"}}, -7), -7);
  EXPECT_EQ(e.find("hpctrain_samples_total", {{"rank", "1"}, {"launch_id", "j-1"}})->value, 6400);
  EXPECT_EQ(e.find("hpctrain_samples_total", {{"rank", "0"}}), nullptr);
  EXPECT_EQ(e.all("plain_gauge").size(), 1u);
}

TEST(Exposition, NamesTheLineAndTheFaultOfBadText) {
  auto error_of = [](const std::string& text) {
    try {
      parse_exposition(text);
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kDataCorrupt);
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(error_of("ok 1\nsteps twelve\n").find("line 2: 'twelve' is not a number"),
            std::string::npos);
  EXPECT_NE(error_of("a{rank=1} 2\n").find("line 1: a label is not name=\"value\""),
            std::string::npos);
  EXPECT_NE(error_of("a{rank=\"1} 2\n").find("no closing quote"), std::string::npos);
  EXPECT_NE(error_of("a\n").find("no value"), std::string::npos);
  EXPECT_NE(error_of("a 1 2 3\n").find("not a timestamp"), std::string::npos);
  EXPECT_NE(error_of("<html>\n").find("no metric name"), std::string::npos);
  EXPECT_TRUE(parse_exposition("# only comments\n\n").empty());
}

}  // namespace
}  // namespace hpct::metrics
