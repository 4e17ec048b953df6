// `hpctrain bench comm` and `bench train` across 2 hosts made of network
// namespaces (label netns; the cluster is the CTest fixture bench_netns, 2
// hosts): started with the launcher's host options, and as ranks of a job
// hpctrain launch started; bench train beside DDP and its comm hooks.
// Checks the fields a user reads, not the speed (speed is for benchmarks).
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <map>
#include <sstream>

#include "cli_summary_run.h"
#include "fashion_shards.h"
#include "launch_test_util.h"
#include "netns_hosts.h"

namespace {

using namespace launch_test;
const std::string H = HPCT_BINARY;  // hpctrain

// Strict: a benchmark line that does not parse fails the test.
std::vector<nlohmann::json> json_lines(const std::string& out) { return hpct::test::json_lines(out, true); }

class BenchNetns : public ::testing::Test {
 protected:
  void SetUp() override {
    cluster_ = hpct::test::read_netns_hosts(HPCT_BENCH_NETNS_DIR, 2);
    if (!cluster_.skip.empty()) GTEST_SKIP() << cluster_.skip;
    ASSERT_TRUE(cluster_.error.empty()) << cluster_.error;
    dir_ = cluster_.dir;
    env_ = cluster_.env;
    hosts_ = cluster_.hosts;
    hosts_opt_ = cluster_.host_option({1, 1}) + cluster_.ssh_options();
  }

  // The allreduce lines and the round-trip lines of one run, checked as a
  // user reads them: one rank per host, every size, bus bandwidth, the raw
  // library call beside ours, the TCP round trip between the hosts.
  void check_comm_output(const std::string& out) {
    auto lines = json_lines(out);
    int rtt = 0, sizes = 0;
    for (const auto& j : lines) {
      ASSERT_EQ(j.value("bench", ""), "comm") << j.dump();
      if (j["op"] == "tcp_round_trip") {
        ++rtt;
        EXPECT_EQ(j["peer_rank"], 1);
        EXPECT_EQ(j["peer_address"].get<std::string>().rfind(hosts_[1] + ":", 0), 0u) << j.dump();
        EXPECT_GT(j["rtt_us"].get<double>(), 0.0);
        EXPECT_LE(j["rtt_min_us"].get<double>(), j["rtt_us"].get<double>());
        continue;
      }
      ASSERT_EQ(j["op"], "allreduce") << j.dump();
      ++sizes;
      EXPECT_EQ(j["np"], 2);
      EXPECT_EQ(j["backend"], "gloo");
      // Across hosts (no shared memory), 2 ranks: our own connections.
      EXPECT_EQ(j["algorithm"], "direct:recursive-doubling") << "hosts made of namespaces must not share memory";
      const double t = j["time_us"].get<double>();
      const double bytes = j["bytes"].get<double>();
      EXPECT_GT(t, 0.0);
      // nccl-tests' bus bandwidth of an allreduce: bytes * 2(n-1)/n / time.
      EXPECT_NEAR(j["busbw_GBps"].get<double>(), bytes * 2 * (2 - 1) / 2 / (t * 1e-6) / 1e9,
                  1e-6 * j["busbw_GBps"].get<double>() + 1e-12);
      EXPECT_EQ(j["raw_call"], "gloo::allreduce");
      EXPECT_GT(j["raw_time_us"].get<double>(), 0.0);
      EXPECT_GT(j["tcp_rtt_us"].get<double>(), 0.0);
      EXPECT_NEAR(j["time_over_rtt"].get<double>(), t / j["tcp_rtt_us"].get<double>(), 1e-6 * t);
    }
    EXPECT_EQ(rtt, 1) << out;
    EXPECT_EQ(sizes, 2) << out;
  }

  hpct::test::NetnsHosts cluster_;
  std::string dir_, hosts_opt_;
  std::map<std::string, std::string> env_;
  std::vector<std::string> hosts_;
};

TEST_F(BenchNetns, CommWithHostOptionsReportsSizesBusBandwidthRawCallAndRoundTrip) {
  Outcome r = run(H + " bench comm" + hosts_opt_ + "--sizes 4K,1M --budget-s 0.1", 120);
  ASSERT_EQ(r.exit_code, 0) << r.out;
  check_comm_output(r.out);
}

TEST_F(BenchNetns, CommInsideAJobStartedByLaunch) {
  Outcome r = run(H + " launch --prefix none" + hosts_opt_ + "-- " + H +
                  " bench comm --sizes 4K,1M --budget-s 0.1", 120);
  ASSERT_EQ(r.exit_code, 0) << r.out;
  check_comm_output(r.out);
}

TEST_F(BenchNetns, CommRefusesMpiAcrossHostsWithoutAnMpiLauncher) {
  Outcome r = run(H + " bench comm --backend mpi" + hosts_opt_ + "--sizes 4K", 60);
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.out.find("--spawner mpirun or srun"), std::string::npos) << r.out;
}

// Our run, then DDP plain and with its fp16 hook on the same hosts: a line
// each, named by hook, and a summary line per hook with the ratio.
TEST_F(BenchNetns, TrainWithHostOptionsAndTheDdpPeerOnTheSameHosts) {
  Outcome r = run(H + " bench train --model cnn --np 2 --steps 6 --phase-steps 3 --warmup 2" + hosts_opt_ +
                      "--peer ddp --peer-hook none,fp16 2>&1", 170);
  ASSERT_EQ(r.exit_code, 0) << r.out;
  nlohmann::json ours;
  std::map<std::string, nlohmann::json> ddp, summary;
  for (const auto& j : json_lines(r.out)) {
    if (j.contains("summary")) summary[j["hook"]] = j;
    else if (j.value("impl", "") == "pytorch-ddp") ddp[j["hook"]] = j;
    else if (j.value("impl", "") == "hpctrain") ours = j;
  }
  ASSERT_TRUE(ours.is_object()) << r.out;
  ASSERT_EQ(ddp.size(), 2u) << r.out;
  ASSERT_EQ(summary.size(), 2u) << r.out;
  EXPECT_EQ(ours["np"], 2);
  EXPECT_EQ(ours["backend"], "gloo");
  EXPECT_EQ(ours["model"], "cnn");
  EXPECT_GT(ours["samples_per_s"].get<double>(), 0.0);
  EXPECT_EQ(ours["compression"], "auto");
  // Across hosts auto measured at least the CNN's large class, the same verdict on both ranks.
  ASSERT_FALSE(ours["compression_auto"].empty()) << ours.dump();
  for (const auto& d : ours["compression_auto"]) {
    EXPECT_TRUE(d["choice"] == "none" || d["choice"] == "fp16") << d.dump();
    EXPECT_GT(d["float32_ms"].get<double>(), 0.0);
  }
  for (const char* hook : {"none", "fp16"}) {
    const auto& d = ddp[hook];
    EXPECT_FALSE(d["failed"].get<bool>()) << d.dump();
    EXPECT_EQ(d["np"], 2);
    EXPECT_EQ(d["model"], "cnn");
    EXPECT_EQ(d["steps"], 6);
    EXPECT_EQ(d["compression"], std::string(hook) == "none" ? "none" : "fp16-hook");
    EXPECT_NEAR(summary[hook]["ratio"].get<double>(),
                ours["samples_per_s"].get<double>() / d["samples_per_s"].get<double>(), 1e-9);
  }
}

// DDP's PowerSGD hook on the MLP (gloo in torch 1.13) aborts on one host,
// and launch stops the other rank; or both ranks hang, and the peer's bound
// on a step ends them. Either way the peer's line says failed and why. The
// crash comes from the two buckets' hook collectives going in a different
// order on the two ranks, a race the hook sometimes wins: in 1 of about 8
// runs it trained its 3 steps (2026-11-27). Such a run must read as a normal
// result, and the job runs again, up to 4 times, until the hook crashes.
TEST_F(BenchNetns, ACrashingDdpHookAcrossHostsIsReportedFailedNotHung) {
  bool crashed = false;
  for (int attempt = 1; attempt <= 4 && !crashed; ++attempt) {
    Outcome r = run(H + " bench train --model mlp --np 2 --steps 3 --warmup 2 --batch 32 --max-samples 2048" +
                        hosts_opt_ + "--peer ddp --peer-hook powersgd:4 --peer-timeout-s 45 2>&1", 170);
    ASSERT_EQ(r.exit_code, 0) << r.out;
    nlohmann::json ddp, summary;
    for (const auto& j : json_lines(r.out)) {
      if (j.contains("summary")) summary = j;
      else if (j.value("impl", "") == "pytorch-ddp") ddp = j;
    }
    ASSERT_TRUE(ddp.is_object() && summary.is_object()) << r.out;
    EXPECT_EQ(ddp["hook"], "powersgd:4");
    EXPECT_GT(summary["hpctrain_samples_per_s"].get<double>(), 0.0);
    if (!ddp["failed"].get<bool>()) {  // the hook won the race this time
      EXPECT_EQ(ddp["steps"], 3) << ddp.dump();
      EXPECT_GT(ddp["samples_per_s"].get<double>(), 0.0) << ddp.dump();
      EXPECT_FALSE(summary.value("ddp_failed", false)) << summary.dump();
      continue;
    }
    crashed = true;
    const std::string error = ddp["error"].get<std::string>();
    EXPECT_TRUE(error.find("op.preamble.length <= op.nbytes") != std::string::npos ||
                error.find("made no progress for 45 s and was ended") != std::string::npos)
        << r.out;
    EXPECT_TRUE(summary["ddp_failed"].get<bool>()) << summary.dump();
  }
  EXPECT_TRUE(crashed) << "DDP's PowerSGD hook trained in 4 runs of 4: the failure path went unexercised";
}

// 2 hosts x 2 ranks: large allreduces go hierarchically (shared memory in
// each host, our own connections across), small ones flat over our own
// connections; a short training job ends with the same parameters on all 4.
TEST_F(BenchNetns, TwoRanksOnEachOfTwoHostsGoHierarchicalAndTrainIdentically) {
  const std::string two_each = cluster_.host_option({2, 2}) + cluster_.ssh_options();
  Outcome comm = run(H + " launch --prefix none" + two_each + "-- " + H + " bench comm --sizes 4K,1M --budget-s 0.1", 120);
  ASSERT_EQ(comm.exit_code, 0) << comm.out;
  std::map<double, std::string> algorithm;
  for (const auto& j : json_lines(comm.out)) {
    if (j.value("op", "") != "allreduce") continue;
    EXPECT_EQ(j["np"], 4) << j.dump();
    algorithm[j["bytes"].get<double>()] = j["algorithm"].get<std::string>();
  }
  EXPECT_EQ(algorithm[4096], "direct:recursive-doubling") << comm.out;
  EXPECT_EQ(algorithm[1 << 20], "hier:shm+direct+shm") << comm.out;

  const auto shards = hpct::test::FashionShards::in_dir(dir_ + "/hier-shards", 1000);
  ASSERT_TRUE(shards.ok()) << shards.output();
  Outcome train = run(H + " launch --prefix none" + two_each + "-- " + H + " train --model cnn --data '" + shards.range(0, 3) +
                          "' --batch 16 --max-steps 20 --threads 1 --seed 3 --log-every 10 "
                          "--progress lines 2>&1",
                      170);
  ASSERT_EQ(train.exit_code, 0) << train.out;
  nlohmann::json summary;
  for (const auto& j : json_lines(train.out)) {
    if (j.value("type", "") == "summary") summary = j;
  }
  ASSERT_TRUE(summary.is_object()) << train.out;
  EXPECT_EQ(summary["np"], 4);
  EXPECT_EQ(summary["steps"], 20);
  EXPECT_TRUE(summary["params_identical_across_ranks"].get<bool>()) << train.out;
}

}  // namespace
