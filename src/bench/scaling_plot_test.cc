#include "bench/scaling_plot.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/error.h"

namespace hpct::bench {
namespace {

std::vector<nlohmann::json> two_runs() {
  return {{{"np", 1},
           {"samples_per_s", 500.0},
           {"scaling_efficiency", 1.0},
           {"model", "cnn"},
           {"batch_per_rank", 64}},
          {{"np", 2},
           {"samples_per_s", 900.0},
           {"scaling_efficiency", 0.9},
           {"model", "cnn"},
           {"batch_per_rank", 64}}};
}

TEST(ScalingPlot, DrawsOnePointPerRankCountOnBothAxes) {
  const std::string path = "/tmp/hpct-scaling-plot-" + std::to_string(::getpid()) + ".svg";
  write_scaling_plot(path, two_runs());
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  const std::string svg = text.str();
  ::unlink(path.c_str());
  EXPECT_EQ(svg.rfind("<svg ", 0), 0u) << svg;
  EXPECT_NE(svg.find("hpctrain bench train: cnn, batch 64 per rank"), std::string::npos);
  size_t circles = 0;
  for (size_t at = svg.find("<circle"); at != std::string::npos; at = svg.find("<circle", at + 1)) {
    ++circles;
  }
  EXPECT_EQ(circles, 4u);  // samples/s and efficiency for np 1 and 2
  EXPECT_NE(svg.find("data-np='2' data-samples-per-s='900.0'"), std::string::npos) << svg;
  EXPECT_NE(svg.find("data-np='2' data-efficiency='0.9'"), std::string::npos) << svg;
  EXPECT_EQ(scaling_plot_svg(two_runs()), svg);  // the file holds the inlined text
  EXPECT_NE(svg.find("stroke='steelblue'"), std::string::npos);
  EXPECT_NE(svg.find("stroke='darkorange'"), std::string::npos);
  EXPECT_NE(svg.find("</svg>"), std::string::npos);
}

TEST(ScalingPlot, UnwritablePathIsIoNamingIt) {
  try {
    write_scaling_plot("/nonexistent-dir/plot.svg", two_runs());
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kIo);
    EXPECT_NE(std::string(e.what()).find("/nonexistent-dir/plot.svg"), std::string::npos);
  }
  EXPECT_THROW(write_scaling_plot("/tmp/x.svg", {}), Error);
}

}  // namespace
}  // namespace hpct::bench
