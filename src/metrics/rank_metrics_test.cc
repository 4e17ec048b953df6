// Each rank's Prometheus endpoint on real Gloo ranks living as threads of
// this process: what a scrape returns after some training steps and
// allreduces, read over HTTP with libcurl as Prometheus would.
#include "metrics/rank_metrics.h"

#include <curl/curl.h>
#include <gtest/gtest.h>

#include <regex>
#include <string>
#include <vector>

#include "comm/testing/thread_world.h"
#include "core/config.h"
#include "core/env.h"
#include "core/error.h"
#include "core/world.h"
#include "engine/engine.h"

namespace hpct::metrics {
namespace {

std::string get(const std::string& url) {
  CURL* c = curl_easy_init();
  std::string body;
  curl_easy_setopt(c, CURLOPT_URL, url.c_str());
  curl_easy_setopt(c, CURLOPT_TIMEOUT, 10L);
  curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, +[](char* p, size_t s, size_t n, void* out) {
    static_cast<std::string*>(out)->append(p, s * n);
    return s * n;
  });
  curl_easy_setopt(c, CURLOPT_WRITEDATA, &body);
  CURLcode rc = curl_easy_perform(c);
  curl_easy_cleanup(c);
  if (rc != CURLE_OK) ADD_FAILURE() << "GET " << url << ": " << curl_easy_strerror(rc);
  return body;
}

// The value of the first series of `name` whose labels include `labels`.
double value_of(const std::string& text, const std::string& name, const std::string& labels) {
  std::regex line("^" + name + "\\{([^}]*)\\} ([0-9.e+-]+)$");
  std::smatch m;
  std::string::size_type start = 0;
  while (start < text.size()) {
    auto end = text.find('\n', start);
    std::string l = text.substr(start, end == std::string::npos ? std::string::npos : end - start);
    if (std::regex_match(l, m, line) && m[1].str().find(labels) != std::string::npos) {
      return std::stod(m[2].str());
    }
    if (end == std::string::npos) break;
    start = end + 1;
  }
  ADD_FAILURE() << "no " << name << "{..." << labels << "...} in\n" << text;
  return -1;
}

TEST(RankMetrics, ScrapeShowsStepsAllreducesByPathAndProcess) {
  comm::testing::run_gloo_world(2, Millis(20000), [&](comm::GlooCommunicator& comm) {
    engine::EngineOptions eo;
    eo.cycle_ms = 1;
    engine::Engine e(comm, eo, Logger(LogLevel::kWarn, "all", comm.rank(), [](const std::string&) {}));
    RankMetricsOptions o;
    o.rank = comm.rank();
    o.host = "host-" + std::to_string(comm.rank());
    o.launch_id = "test-job";
    o.restarts = 2;
    o.engine = &e;
    o.comm = &comm;
    RankMetrics m(o);
    ASSERT_GT(m.port(), 0);
    std::vector<float> v(1 << 16, 1.0f);
    for (int i = 0; i < 3; ++i) {
      e.allreduce_async("g", {v.data(), comm::DataType::kFloat32, {1 << 16}, nullptr}, comm::ReduceOp::kSum)
          .wait(Millis(10000));
      m.record_step(64, 0.001, 0.010, 0.004, 0.002);
    }
    const std::string text = get(m.url());
    const std::string me = "rank=\"" + std::to_string(comm.rank()) + "\"";
    EXPECT_EQ(value_of(text, "hpctrain_samples_total", me), 192);
    EXPECT_EQ(value_of(text, "hpctrain_steps_total", "launch_id=\"test-job\""), 3);
    EXPECT_EQ(value_of(text, "hpctrain_step_seconds_count", "host=\"host-" + std::to_string(comm.rank())), 3);
    EXPECT_NEAR(value_of(text, "hpctrain_step_phase_seconds_sum", "phase=\"compute\""), 0.030, 1e-9);
    EXPECT_EQ(value_of(text, "hpctrain_restarts_total", me), 2);
    EXPECT_EQ(value_of(text, "hpctrain_compression_ratio", me), 1);
    EXPECT_EQ(value_of(text, "hpctrain_reduce_scatter_sent_bytes_total", me), 0);  // no sharding here
    // Before the ranks' first straggler exchange: every cause at 0, no wait yet.
    for (const char* cause : {"data", "compute", "network"})
      EXPECT_EQ(value_of(text, "hpctrain_straggler", std::string("cause=\"") + cause + "\""), 0)
          << cause;
    EXPECT_EQ(value_of(text, "hpctrain_straggler_slowdown_ratio", me), 0);
    EXPECT_EQ(value_of(text, "hpctrain_straggler_late_seconds_total", me), 0);
    // The gradient went by one path; its bytes are counted there.
    const std::string path = comm.algorithm(comm::OpKind::kAllreduce, v.size() * 4);
    const std::string label = "path=\"" + path.substr(0, path.find(':')) + "\"";
    EXPECT_GE(value_of(text, "hpctrain_allreduce_bytes_total", label), 3.0 * v.size() * 4);
    EXPECT_GT(value_of(text, "hpctrain_process_cpu_seconds_total", me), 0);
    EXPECT_GT(value_of(text, "hpctrain_process_resident_memory_bytes", me), 1e6);
    EXPECT_NE(text.find("# TYPE hpctrain_samples_total counter"), std::string::npos);
    EXPECT_NE(text.find("# TYPE hpctrain_step_seconds histogram"), std::string::npos);
  });
}

TEST(RankMetrics, DataSourcesAreSummedByKindAndEveryKindIsThereFromTheStart) {
  int calls = 0;
  RankMetricsOptions o;
  o.data_sources = [&calls] {
    ++calls;
    std::vector<DataSourceTotals> v;
    if (calls > 1) {
      v.push_back({"s3", 1000, 2, 0.5});
      v.push_back({"http", 10, 0, 0});
      v.push_back({"http", 5, 1, 0.25});
    }
    return v;
  };
  RankMetrics m(o);
  std::string text = get(m.url());  // no source read yet: zeros, not missing series
  EXPECT_EQ(value_of(text, "hpctrain_data_s3_bytes_total", "rank=\"0\""), 0);
  EXPECT_EQ(value_of(text, "hpctrain_data_http_stalls_total", "rank=\"0\""), 0);
  text = get(m.url());
  EXPECT_EQ(value_of(text, "hpctrain_data_s3_bytes_total", "rank=\"0\""), 1000);
  EXPECT_EQ(value_of(text, "hpctrain_data_s3_stalls_total", "rank=\"0\""), 2);
  EXPECT_EQ(value_of(text, "hpctrain_data_s3_stall_seconds_total", "rank=\"0\""), 0.5);
  EXPECT_EQ(value_of(text, "hpctrain_data_http_bytes_total", "rank=\"0\""), 15);
  EXPECT_EQ(value_of(text, "hpctrain_data_http_stall_seconds_total", "rank=\"0\""), 0.25);
  EXPECT_NE(text.find("# TYPE hpctrain_data_http_bytes_total counter"), std::string::npos);
}

TEST(RankMetrics, MembershipChangesCountTheElasticGenerationsAndTheWorldSizeFollows) {
  RankMetrics m(RankMetricsOptions{});
  m.record_world(0, 3);  // the first world is no change
  std::string text = get(m.url());
  EXPECT_EQ(value_of(text, "hpctrain_membership_changes_total", "rank=\"0\""), 0);
  EXPECT_EQ(value_of(text, "hpctrain_world_size", "rank=\"0\""), 3);
  m.record_world(2, 2);  // generation 2: two changes since the start
  m.record_world(1, 2);  // a late report of an older generation: a counter never goes back
  text = get(m.url());
  EXPECT_EQ(value_of(text, "hpctrain_membership_changes_total", "rank=\"0\""), 2);
  EXPECT_EQ(value_of(text, "hpctrain_world_size", "rank=\"0\""), 2);
}

// The optimizer's byte counts as gauges, and the process's peak resident
// memory: a 64 MiB buffer touched and freed leaves the peak at least that
// far above what was resident before it.
TEST(RankMetrics, MemoryGaugesFollowTheOptimizerAndThePeakResidentMemoryStays) {
  RankMetrics m(RankMetricsOptions{});
  std::string text = get(m.url());
  EXPECT_EQ(value_of(text, "hpctrain_optimizer_state_bytes", "rank=\"0\""), 0);
  const double before = value_of(text, "hpctrain_process_resident_memory_bytes", "rank=\"0\"");
  {
    std::vector<char> big(64u << 20);
    volatile char* touch = big.data();  // volatile: the stores are not optimized away
    for (size_t i = 0; i < big.size(); i += 4096) touch[i] = 1;
  }
  m.record_memory({80e6, 40e6, 160e6 / 3, 80e6});
  m.record_memory({80e6 / 3, 80e6 / 3, 160e6 / 3, 50e6});  // the last values count
  text = get(m.url());
  EXPECT_NEAR(value_of(text, "hpctrain_parameter_bytes", "rank=\"0\""), 80e6 / 3, 1);
  EXPECT_EQ(value_of(text, "hpctrain_parameter_peak_bytes", "rank=\"0\""), 50e6);
  EXPECT_NEAR(value_of(text, "hpctrain_gradient_bytes", "rank=\"0\""), 80e6 / 3, 1);
  EXPECT_NEAR(value_of(text, "hpctrain_optimizer_state_bytes", "rank=\"0\""), 160e6 / 3, 1);
  EXPECT_GE(value_of(text, "hpctrain_process_peak_resident_memory_bytes", "rank=\"0\""),
            before + (64u << 20) * 0.9);
  EXPECT_NE(text.find("# TYPE hpctrain_process_peak_resident_memory_bytes gauge"), std::string::npos);
}

TEST(RankMetrics, PortInUseIsOneLineNamingTheAddressAndTheFix) {
  RankMetricsOptions o;
  RankMetrics first(o);
  o.port = first.port();
  try {
    RankMetrics second(o);
    ADD_FAILURE() << "two endpoints on port " << o.port;
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kIo);
    EXPECT_NE(std::string(e.what()).find("127.0.0.1:" + std::to_string(o.port)), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("--metrics-port"), std::string::npos) << e.what();
  }
}

TEST(RankMetrics, OffUnlessTheBasePortIsSetAndEachLocalRankGetsItsOwn) {
  Config c;
  WorldInfo w;
  MapEnv env{{"HPCT_JOB_ID", "j1"}, {"HPCT_HOSTNAME", "node-a"}};
  EXPECT_EQ(rank_metrics_from_config(c, w, env, nullptr, nullptr), nullptr);
  c.metrics_port = -3;
  EXPECT_THROW(rank_metrics_from_config(c, w, env, nullptr, nullptr), Error);
}

}  // namespace
}  // namespace hpct::metrics
