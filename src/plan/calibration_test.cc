// The calibration file, the alpha-beta fit and the unit parsers.
#include "plan/calibration.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/error.h"

namespace hpct::plan {
namespace {

std::string temp_path(const std::string& name) {
  return ::testing::TempDir() + "plan_" + std::to_string(::getpid()) + "_" + name;
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(PlanCalibration, SavedFileLoadsBackEqual) {
  Calibration c;
  c.profile = {"mlp",
               64,
               0.031,
               0.062,
               0.011,
               0.0004,
               {{"fc3.bias", 40, 0.001}, {"fc3.weight", 163840, 0.002}}};
  c.algorithms["direct"] = {4.5e-5, 9.4e-10, 2, "bench comm, 6 sizes, 2 ranks"};
  c.algorithms["shm"] = {1.2e-5, 1.9e-10, 2, "given"};
  c.engine.fusion_bytes = 1 << 20;
  c.host = {4, 2, 2, 1.12};
  const std::string path = temp_path("round_trip.json");
  save_calibration(c, path);
  const Calibration d = load_calibration(path);
  EXPECT_EQ(to_json(d), to_json(c));
  EXPECT_EQ(d.profile.gradients.size(), 2u);
  EXPECT_EQ(d.profile.gradients[1].name, "fc3.weight");
  EXPECT_DOUBLE_EQ(d.profile.gradients[1].bytes, 163840);
  EXPECT_DOUBLE_EQ(d.algorithms.at("direct").beta_s_per_byte, 9.4e-10);
  EXPECT_EQ(d.algorithms.at("shm").source, "given");
  EXPECT_EQ(d.host.shared_cores, 2);
  EXPECT_DOUBLE_EQ(d.host.busy_factor, 1.12);
  EXPECT_DOUBLE_EQ(d.profile.gradient_bytes(), 163880);
  std::remove(path.c_str());
}

TEST(PlanCalibration, BadFilesNameTheProblem) {
  EXPECT_NE(
      error_of([] { load_calibration("/nonexistent/cal.json"); }).find("/nonexistent/cal.json"),
      std::string::npos);
  const std::string path = temp_path("bad.json");
  std::ofstream(path) << "{not json";
  EXPECT_NE(error_of([&] { load_calibration(path); }).find("is not JSON"), std::string::npos);
  std::ofstream(path) << R"({"x": 1})";
  EXPECT_NE(error_of([&] { load_calibration(path); }).find("not a calibration file"),
            std::string::npos);
  Calibration c;
  c.profile.model = "mlp";
  nlohmann::json j = to_json(c);
  j["profile"].erase("backward_s");
  std::ofstream(path) << j.dump();
  EXPECT_NE(error_of([&] { load_calibration(path); }).find("profile.backward_s is missing"),
            std::string::npos);
  // A file from before the busy factor was measured: 1.
  j = to_json(c);
  j["host"].erase("busy_factor");
  EXPECT_EQ(calibration_from_json(j).host.busy_factor, 1.0);
  j["host"]["busy_factor"] = 0;
  EXPECT_NE(error_of([&] { calibration_from_json(j); }).find("host.busy_factor must be above 0"),
            std::string::npos);
  j = to_json(c);
  j["hpctrain_plan_calibration"] = 7;
  EXPECT_NE(error_of([&] { calibration_from_json(j); }).find("version 7 is not supported"),
            std::string::npos);
  std::remove(path.c_str());
}

TEST(PlanFit, RecoversALineAndItsParts) {
  std::vector<std::pair<double, double>> pts;
  for (double s : {4096.0, 65536.0, 1048576.0, 16777216.0}) pts.push_back({s, 50e-6 + s * 1e-9});
  const AlphaBeta ab = fit_alpha_beta(pts);
  EXPECT_NEAR(ab.alpha_s, 50e-6, 1e-9);
  EXPECT_NEAR(ab.beta_s_per_byte, 1e-9, 1e-14);
  EXPECT_THROW(fit_alpha_beta({{4096, 1e-4}}), Error);
  EXPECT_THROW(fit_alpha_beta({{4096, 1e-4}, {4096, 2e-4}}), Error);
}

TEST(PlanFit, BenchCommLinesGiveDirectRingAndSharedMemory) {
  // As bench comm prints them: 2 ranks across hosts (ours direct, Gloo's
  // ring as the raw call), and 2 ranks on one host through shared memory.
  std::vector<nlohmann::json> lines;
  for (double s : {4096.0, 1048576.0, 67108864.0}) {
    lines.push_back({{"bench", "comm"},
                     {"op", "allreduce"},
                     {"np", 2},
                     {"bytes", s},
                     {"algorithm", "direct:recursive-doubling"},
                     {"time_us", (70e-6 + s * 0.95e-9) * 1e6},
                     {"raw_call", "gloo::allreduce"},
                     {"raw_time_us", (2 * 200e-6 + s * 1.1e-9) * 1e6}});
    lines.push_back({{"bench", "comm"},
                     {"op", "allreduce"},
                     {"np", 2},
                     {"bytes", s},
                     {"algorithm", "shm:reduce-scatter-allgather"},
                     {"time_us", (8e-6 + s * 0.2e-9) * 1e6}});
  }
  lines.push_back({{"bench", "comm"}, {"op", "tcp_round_trip"}, {"rtt_us", 60}});
  std::map<std::string, AlphaBeta> algs;
  const auto names = fit_bench_comm(lines, &algs);
  EXPECT_EQ(names.size(), 3u);
  EXPECT_NEAR(algs.at("direct").alpha_s, 70e-6, 1e-9);
  EXPECT_NEAR(algs.at("direct").beta_s_per_byte, 0.95e-9, 1e-14);
  EXPECT_NEAR(algs.at("ring").alpha_s, 200e-6, 1e-9);
  EXPECT_NEAR(algs.at("ring").beta_s_per_byte, 1.1e-9, 1e-14);
  EXPECT_NEAR(algs.at("shm").alpha_s, 8e-6, 1e-9);
  EXPECT_EQ(algs.at("shm").ranks, 2);
}

// Three runs of bench comm on one link, the second caught in a stall (10x at
// 1 MiB and 64 MiB): the fit takes each size's median and comes out as the
// clean runs'; one run alone would have set beta 10x.
TEST(PlanFit, RepeatedRunsCountOncePerSizeByTheirMedian) {
  std::vector<nlohmann::json> lines;
  for (int run = 0; run < 3; ++run) {
    for (double s : {4096.0, 1048576.0, 67108864.0}) {
      const double stall = run == 1 && s > 4096 ? 10.0 : 1.0;
      lines.push_back({{"bench", "comm"},
                       {"op", "allreduce"},
                       {"np", 2},
                       {"bytes", s},
                       {"algorithm", "shm:reduce-scatter-allgather"},
                       {"time_us", (8e-6 + s * 0.2e-9) * stall * 1e6 * (1 + 0.01 * run)}});
    }
  }
  std::map<std::string, AlphaBeta> algs;
  ASSERT_EQ(fit_bench_comm(lines, &algs).size(), 1u);
  EXPECT_NEAR(algs.at("shm").beta_s_per_byte, 0.2e-9 * 1.02, 0.2e-9 * 0.02);
  EXPECT_NEAR(algs.at("shm").alpha_s, 8e-6 * 1.02, 8e-6 * 0.05);
  EXPECT_NE(algs.at("shm").source.find("median of 3 runs"), std::string::npos) << algs.at("shm").source;

  std::map<std::string, AlphaBeta> stalled;
  fit_bench_comm({lines.begin() + 3, lines.begin() + 6}, &stalled);
  EXPECT_GT(stalled.at("shm").beta_s_per_byte, 5 * 0.2e-9);
}

TEST(PlanUnits, RatesAndTimesParseAndBadOnesAreNamed) {
  EXPECT_DOUBLE_EQ(parse_rate_bytes_per_s("25gbit"), 25e9 / 8);
  EXPECT_DOUBLE_EQ(parse_rate_bytes_per_s("10Gbit/s"), 10e9 / 8);
  EXPECT_DOUBLE_EQ(parse_rate_bytes_per_s("1.25GB/s"), 1.25e9);
  EXPECT_DOUBLE_EQ(parse_rate_bytes_per_s("100mbit"), 100e6 / 8);
  EXPECT_DOUBLE_EQ(parse_seconds("20us"), 20e-6);
  EXPECT_DOUBLE_EQ(parse_seconds("1.5ms"), 1.5e-3);
  EXPECT_DOUBLE_EQ(parse_seconds("2s"), 2.0);
  EXPECT_NE(error_of([] {
              parse_rate_bytes_per_s("25 furlongs");
            }).find("link rate '25 furlongs' is not understood"),
            std::string::npos);
  EXPECT_NE(error_of([] { parse_seconds("-3us"); }).find("e.g. 20us"), std::string::npos);
  EXPECT_THROW(parse_seconds("20"), Error);
}

}  // namespace
}  // namespace hpct::plan

namespace hpct::plan {
namespace {

// A 1-rank bench train line (the fields with_measured_step reads), as
// `hpctrain bench train --np 1,4` prints it.
nlohmann::json one_rank_line(int np, double data_ms, double compute_ms, double optimizer_ms) {
  return {
      {"bench", "train"},
      {"np", np},
      {"batch_per_rank", 64},
      {"samples_per_s", 64 / ((data_ms + compute_ms + optimizer_ms) * 1e-3)},
      {"split_ms_mean",
       {{"data", data_ms}, {"compute", compute_ms}, {"sync", 0.02}, {"optimizer", optimizer_ms}}}};
}

TEST(PlanCalibration, MeasuredStepReplacesTheProfilesPartsKeepingItsShape) {
  // Profiled: forward 10 ms, backward 20 ms, gradients ready at 5 and 20 ms.
  Profile p{"mlp",
            64,
            0.010,
            0.020,
            0.004,
            0.001,
            {{"fc2.weight", 4e6, 0.005}, {"fc1.weight", 8e6, 0.020}}};
  // The trainer's loop measured forward + backward 45 ms: 1.5x the profile.
  const Profile m = with_measured_step(p, one_rank_line(1, 0.5, 45, 3));
  EXPECT_NEAR(m.forward_s, 0.015, 1e-12);
  EXPECT_NEAR(m.backward_s, 0.030, 1e-12);
  EXPECT_NEAR(m.gradients[0].ready_s, 0.0075, 1e-12);
  EXPECT_NEAR(m.gradients[1].ready_s, 0.030, 1e-12);  // still the end of backward
  EXPECT_NEAR(m.data_s, 0.0005, 1e-12);
  EXPECT_NEAR(m.optimizer_s, 0.003, 1e-12);
  EXPECT_NEAR(m.step_s(), 0.0485, 1e-12);
  EXPECT_EQ(m.gradients[1].bytes, 8e6);
  EXPECT_EQ(m.gradients[0].name, "fc2.weight");

  // The 1-rank line is found among the lines of --np 1,4.
  const std::vector<nlohmann::json> lines = {one_rank_line(4, 1, 80, 4),
                                             one_rank_line(1, 0.5, 45, 3)};
  EXPECT_EQ(one_rank_bench_train_line(lines, "t.jsonl")["split_ms_mean"]["compute"].get<double>(),
            45);
}

TEST(PlanCalibration, MeasuredStepRefusesWhatIsNotOneRanksBenchTrainLine) {
  Profile p{"mlp", 64, 0.010, 0.020, 0.004, 0.001, {{"w", 4e6, 0.005}}};
  EXPECT_NE(error_of([&] { with_measured_step(p, one_rank_line(4, 1, 80, 4)); }).find("np\": 1"),
            std::string::npos);
  auto no_split = one_rank_line(1, 1, 40, 3);
  no_split.erase("split_ms_mean");
  EXPECT_NE(error_of([&] { with_measured_step(p, no_split); }).find("split_ms_mean"),
            std::string::npos);
  auto other_batch = one_rank_line(1, 1, 40, 3);
  other_batch["batch_per_rank"] = 32;
  EXPECT_NE(error_of([&] { with_measured_step(p, other_batch); }).find("same --batch"),
            std::string::npos);
  EXPECT_NE(error_of([&] {
              one_rank_bench_train_line({one_rank_line(2, 1, 40, 3)}, "t.jsonl");
            }).find("t.jsonl holds no 1-rank"),
            std::string::npos);
}

TEST(PlanCalibration, AllCoresFactorIsTheFullHostsStepOverOneRanks) {
  // 1 rank alone: 0.5 + 45 + 3 = 48.5 ms a step; 2 ranks on the 2 cores:
  // 0.5 + 50 + 4 = 54.5 ms each.
  const auto alone = one_rank_line(1, 0.5, 45, 3);
  const auto two = one_rank_line(2, 0.5, 50, 4);
  EXPECT_NEAR(all_cores_factor({two, alone}, 2, 1, "t.jsonl"), 54.5 / 48.5, 1e-12);
  // 4 ranks on 2 cores have half a core each: 107 ms / 48.5 ms / 2. With
  // 1, 2 and 4 ranks in one file, 2 (the first to fill the cores) counts.
  const auto four = one_rank_line(4, 1, 100, 6);
  EXPECT_NEAR(all_cores_factor({alone, four}, 2, 1, "t.jsonl"), 107 / 48.5 / 2, 1e-12);
  EXPECT_NEAR(all_cores_factor({alone, four, two}, 2, 1, "t.jsonl"), 54.5 / 48.5, 1e-12);
  // 2 ranks of 2 threads fill 4 cores.
  EXPECT_NEAR(all_cores_factor({alone, two}, 4, 2, "t.jsonl"), 54.5 / 48.5, 1e-12);
  // 2 ranks do not fill 4 cores of 1 thread: named, with the run that would.
  EXPECT_NE(error_of([&] {
              all_cores_factor({alone, two}, 4, 1, "t.jsonl");
            }).find("t.jsonl holds no bench train line whose ranks fill the host's 4 cores"),
            std::string::npos);
  EXPECT_NE(error_of([&] {
              all_cores_factor({alone, two}, 4, 1, "t.jsonl");
            }).find("--np 1,4"),
            std::string::npos);
  EXPECT_NE(
      error_of([&] { all_cores_factor({two}, 2, 1, "t.jsonl"); }).find("t.jsonl holds no 1-rank"),
      std::string::npos);
}

}  // namespace
}  // namespace hpct::plan
