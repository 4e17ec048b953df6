// The launcher's discovery file and --targets as `hpctrain top` reads them,
// and the one-line errors for what it cannot use.
#include "metrics/discovery.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <functional>

#include "core/error.h"

namespace hpct::metrics {
namespace {

std::string write_file(const std::string& text) {
  std::string path = ::testing::TempDir() + "sd-" + std::to_string(std::rand()) + ".json";
  std::ofstream(path) << text;
  return path;
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "no error";
}

TEST(Discovery, ReadsTheLaunchersFileAndTargetLists) {
  // As hpctrain launch --metrics-sd writes it (launch/prometheus_targets_test.cc).
  auto t =
      read_discovery_file(write_file("[{\"targets\": [\"10.7.0.2:9400\", \"10.7.0.3:9400\"], "
                                     "\"labels\": {\"launch_id\": \"job-7\"}}]\n"));
  EXPECT_EQ(t.targets, (std::vector<std::string>{"10.7.0.2:9400", "10.7.0.3:9400"}));
  EXPECT_EQ(t.launch_id, "job-7");
  EXPECT_EQ(parse_target_list("h1:9400,h2:9401").targets,
            (std::vector<std::string>{"h1:9400", "h2:9401"}));
}

TEST(Discovery, NamesTheFileAndTheFix) {
  EXPECT_NE(error_of([] {
              read_discovery_file("/nonexistent/sd.json");
            }).find("read the metrics discovery file /nonexistent/sd.json: No such file"),
            std::string::npos);
  const std::string yaml = write_file("- targets: ['h1:9400']\n");
  std::string e = error_of([&] { read_discovery_file(yaml); });
  EXPECT_NE(e.find(yaml + ": not JSON"), std::string::npos) << e;
  EXPECT_NE(e.find("hpctrain launch --metrics-sd writes"), std::string::npos) << e;
  e = error_of([&] { read_discovery_file(write_file("[{\"targets\": [\"h1\"]}]")); });
  EXPECT_NE(e.find("target \"h1\" is not \"host:port\""), std::string::npos) << e;
  e = error_of([&] { read_discovery_file(write_file("[]")); });
  EXPECT_NE(e.find("lists no targets"), std::string::npos) << e;
  e = error_of([] { parse_target_list("h1:9400,h2:99999"); });
  EXPECT_NE(e.find("--targets: 'h2:99999' is not host:port"), std::string::npos) << e;
}

}  // namespace
}  // namespace hpct::metrics
