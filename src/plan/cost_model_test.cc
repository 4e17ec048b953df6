// The cost model against cases worked out by hand from the formulas in
// cost_model.h.
#include "plan/cost_model.h"

#include <gtest/gtest.h>

#include "core/error.h"

namespace hpct::plan {
namespace {

// direct: 100 us + 1 ns/byte; ring: 50 us + 2 ns/byte per step; shm (2
// ranks): 10 us + 0.1 ns/byte; casts 0.1 ns per float32 byte.
Calibration hand_calibration() {
  Calibration c;
  c.profile.model = "hand";
  c.profile.batch = 64;
  c.profile.forward_s = 0.05;
  c.profile.backward_s = 0.1;
  c.profile.optimizer_s = 0.01;
  c.profile.data_s = 0;
  c.profile.gradients = {{"late.weight", 1e6, 0.02}, {"early.weight", 1e6, 0.1}};
  c.algorithms["direct"] = {1e-4, 1e-9, 2, "given"};
  c.algorithms["ring"] = {5e-5, 2e-9, 2, "given"};
  c.algorithms["shm"] = {1e-5, 1e-10, 2, "given"};
  c.engine.cast_s_per_byte = 1e-10;
  c.engine.cycle_s = 0.005;
  c.host.cores = 2;
  return c;
}

Scenario shape(int hosts, int local, SyncPath path = SyncPath::kFlat,
               std::string compression = "none") {
  Scenario s;
  s.hosts = hosts;
  s.ranks_per_host = local;
  s.path = path;
  s.compression = std::move(compression);
  return s;
}

TEST(PlanAllreduce, EachAlgorithmMatchesItsFormula) {
  const Calibration c = hand_calibration();
  // 2 ranks: one direct exchange of S.
  auto a = allreduce_cost(c, shape(2, 1), 1e6);
  EXPECT_EQ(a.algorithm, "direct");
  EXPECT_NEAR(a.seconds, 1e-4 + 1e6 * 1e-9, 1e-12);
  EXPECT_NEAR(a.wire_bytes_per_host, 1e6, 1e-6);
  // 4 ranks, 1 MB: the ring, 2(n-1) steps of S/n.
  a = allreduce_cost(c, shape(4, 1), 1e6);
  EXPECT_EQ(a.algorithm, "ring");
  EXPECT_NEAR(a.seconds, 6 * 5e-5 + 1.5 * 1e6 * 2e-9, 1e-12);
  EXPECT_NEAR(a.wire_bytes_per_host, 1.5e6, 1e-6);
  // Small messages: recursive doubling, log2(4) = 2 steps; 3 ranks: 1 + fold in and out.
  EXPECT_NEAR(allreduce_cost(c, shape(4, 1), 1000).seconds, 2 * (1e-4 + 1000e-9), 1e-12);
  EXPECT_NEAR(allreduce_cost(c, shape(3, 1), 1000).seconds, 3 * (1e-4 + 1000e-9), 1e-12);
  // One host, 4 ranks: shared memory, bytes moved scaled from 2 ranks (1.0) to 4 (1.5), and
  // the 4 ranks take turns on the host's 2 cores (2x; the calibration's 2 ranks had a core each).
  a = allreduce_cost(c, shape(1, 4), 1e6);
  EXPECT_EQ(a.algorithm, "shm");
  EXPECT_NEAR(a.seconds, 1e-5 + 1e6 * 1e-10 * 1.5 * 2, 1e-12);
  EXPECT_EQ(a.wire_bytes_per_host, 0);
  // Hierarchical 2x2: shm twice around one exchange of S through the host link.
  a = allreduce_cost(c, shape(2, 2, SyncPath::kHierarchical), 1e6);
  EXPECT_EQ(a.algorithm, "hier");
  EXPECT_NEAR(a.seconds, 2 * (1e-5 + 1e6 * 1e-10) + (1e-4 + 1e6 * 1e-9), 1e-12);
  // Hosts sharing 2 cores (namespace hosts): both hosts' shared-memory steps run at once on
  // them, 4 ranks on 2 cores, so each takes 2x; the exchange is as before.
  {
    Calibration shared = c;
    shared.host.shared_cores = 2;
    a = allreduce_cost(shared, shape(2, 2, SyncPath::kHierarchical), 1e6);
    EXPECT_NEAR(a.seconds, 2 * (1e-5 + 1e6 * 1e-10 * 2) + (1e-4 + 1e6 * 1e-9), 1e-12);
  }
  // Hierarchical 3x2 with 1 MB slices: a ring of the 3 hosts, 4 steps of S/3 through each link.
  a = allreduce_cost(c, shape(3, 2, SyncPath::kHierarchical), 2e6);
  EXPECT_EQ(a.algorithm, "hier");
  EXPECT_NEAR(a.seconds, 2 * (1e-5 + 2e6 * 1e-10) + 4 * 1e-4 + 4.0 / 3 * 2e6 * 1e-9, 1e-12);
  EXPECT_NEAR(a.wire_bytes_per_host, 4.0 / 3 * 2e6, 1e-6);
  // Slices under 256 KiB keep recursive doubling: 1 step plus the fold in and out.
  a = allreduce_cost(c, shape(3, 2, SyncPath::kHierarchical), 2e5);
  EXPECT_NEAR(a.seconds, 2 * (1e-5 + 2e5 * 1e-10) + 3 * (1e-4 + 2e5 * 1e-9), 1e-12);
  // Parameter server on its own host, 2 workers: the server link carries 2S.
  Scenario ps = shape(2, 1, SyncPath::kParameterServer);
  ps.servers = 1;
  ps.servers_on_own_hosts = true;
  a = allreduce_cost(c, ps, 1e6);
  EXPECT_EQ(a.algorithm, "ps");
  EXPECT_NEAR(a.seconds, 2e-4 + 1e-4 + 2e6 * 1e-9, 1e-12);
  // fp16: half the bytes plus the casts; a lossy mode with a quarter of them.
  EXPECT_NEAR(allreduce_cost(c, shape(2, 1, SyncPath::kFlat, "fp16"), 1e6).seconds,
              1e-4 + 5e5 * 1e-9 + 1e6 * 1e-10, 1e-12);
  EXPECT_NEAR(allreduce_cost(c, shape(2, 1, SyncPath::kFlat, "ratio:0.25"), 1e6).seconds,
              1e-4 + 2.5e5 * 1e-9 + 1e6 * 1e-10, 1e-12);
  // auto keeps float32 in shared memory and under 64 KiB, takes fp16 where it pays.
  EXPECT_NEAR(allreduce_cost(c, shape(2, 1, SyncPath::kFlat, "auto"), 1000).seconds, 1e-4 + 1000e-9,
              1e-12);
  EXPECT_NEAR(allreduce_cost(c, shape(2, 1, SyncPath::kFlat, "auto"), 1e6).seconds,
              1e-4 + 5e5 * 1e-9 + 1e-4, 1e-12);
  EXPECT_EQ(allreduce_cost(c, shape(1, 2, SyncPath::kFlat, "fp16"), 1e6).algorithm, "shm");
}

TEST(PlanPredict, OverlapHidesTheEarlyBucketBehindBackward) {
  const Calibration c = hand_calibration();
  // One rank on a 2-core host: overlap on. The late layer's gradient is
  // ready at 20 ms, goes alone at 25 ms (cycle) and ends at 26.1 ms; the
  // other is ready at the end of backward (100 ms), goes at 105 ms, ends at
  // 106.1 ms: 6.1 ms shows.
  Prediction p = predict(c, shape(2, 1));
  EXPECT_TRUE(p.overlap);
  EXPECT_EQ(p.buckets, 2);
  EXPECT_NEAR(p.compute_s, 0.16, 1e-12);
  EXPECT_NEAR(p.sync_s, 2 * 1.1e-3, 1e-12);
  EXPECT_NEAR(p.exposed_sync_s, 0.0061, 1e-12);
  EXPECT_NEAR(p.step_s, 0.1661, 1e-12);
  EXPECT_NEAR(p.samples_per_s, 128 / 0.1661, 1e-9);
  EXPECT_NEAR(p.efficiency, 0.16 / 0.1661, 1e-12);
  EXPECT_NEAR(p.wire_bytes_per_host, 2e6, 1e-6);

  // Two ranks per 2-core host fill it: no overlap, one fused bucket after backward.
  p = predict(c, shape(2, 2, SyncPath::kHierarchical));
  EXPECT_FALSE(p.overlap);
  EXPECT_EQ(p.buckets, 1);
  EXPECT_NEAR(p.exposed_sync_s, 2 * (1e-5 + 2e6 * 1e-10) + (1e-4 + 2e6 * 1e-9), 1e-12);
  EXPECT_EQ(p.algorithm, "hier");
}

TEST(PlanPredict, OneRankIsTheProfileAndEfficiencyIsOne) {
  const Calibration c = hand_calibration();
  const Prediction p = predict(c, shape(1, 1));
  EXPECT_NEAR(p.step_s, c.profile.step_s(), 1e-12);
  EXPECT_NEAR(p.efficiency, 1.0, 1e-12);
  EXPECT_EQ(p.exposed_sync_s, 0);
  EXPECT_EQ(p.wire_bytes_per_host, 0);
}

TEST(PlanPredict, RanksSharingCoresTakeWholeTurnsOfOneRanksCompute) {
  // ceil(ranks x threads / cores), times the busy factor once they fill the cores.
  EXPECT_EQ(compute_slowdown(1, 1, 2, 1.1), 1.0);  // one rank: the calibration itself
  EXPECT_EQ(compute_slowdown(1, 4, 2, 1.1), 1.0);
  EXPECT_EQ(compute_slowdown(2, 1, 4, 1.1), 1.0);  // cores to spare
  EXPECT_NEAR(compute_slowdown(2, 1, 2, 1.1), 1.1, 1e-12);
  EXPECT_NEAR(compute_slowdown(4, 1, 4, 1.1), 1.1, 1e-12);
  EXPECT_EQ(compute_slowdown(3, 1, 2, 1.0), 2.0);  // not 1.5: one core holds two of them
  EXPECT_NEAR(compute_slowdown(3, 1, 2, 1.1), 2.2, 1e-12);
  EXPECT_EQ(compute_slowdown(6, 1, 2, 1.0), 3.0);
  EXPECT_EQ(compute_slowdown(3, 2, 4, 1.0), 2.0);  // 6 threads on 4 cores
  EXPECT_EQ(compute_slowdown(5, 1, 4, 1.0), 2.0);
  EXPECT_THROW(compute_slowdown(0, 1, 2, 1.0), Error);
  EXPECT_THROW(compute_slowdown(2, 1, 0, 1.0), Error);
}

TEST(PlanPredict, HostsSharingCoresSlowComputeByWholeTurnsAndTheBusyFactor) {
  Calibration c = hand_calibration();
  c.host.shared_cores = 2;  // namespace hosts on one 2-core machine
  // 6 ranks on 2 cores: 3 turns of 160 ms.
  EXPECT_NEAR(predict(c, shape(3, 2, SyncPath::kHierarchical)).compute_s, 0.16 * 3, 1e-12);
  // 2 ranks, a core each.
  EXPECT_NEAR(predict(c, shape(2, 1)).compute_s, 0.16, 1e-12);
  // 3 ranks on 2 cores, 1 per host (overlap on: each host sees 2 cores).
  // Compute 2 x 160 ms; backward 200 ms, the late gradient ready at 40 ms:
  // it goes at 45 ms; the ring of 1 MB on 3 ranks takes 4 x 50 us + 4/3 x
  // 1e6 x 2 ns = 2.8667 ms. The early one is ready at 200 ms, goes at 205,
  // ends at 207.8667: 7.8667 ms show.
  Prediction p = predict(c, shape(3, 1));
  EXPECT_TRUE(p.overlap);
  const double ring = 4 * 5e-5 + 4.0 / 3 * 1e6 * 2e-9;
  EXPECT_EQ(p.algorithm, "ring");
  EXPECT_NEAR(p.compute_s, 0.32, 1e-12);
  EXPECT_NEAR(p.sync_s, 2 * ring, 1e-12);
  EXPECT_NEAR(p.exposed_sync_s, 0.005 + ring, 1e-12);
  EXPECT_NEAR(p.step_s, 0.32 + 0.005 + ring, 1e-12);
  EXPECT_NEAR(p.samples_per_s, 3 * 64 / (0.325 + ring), 1e-9);
  // A busy factor of 1.1 (every core slower when all run ranks) once the
  // ranks fill the cores: 2 ranks 176 ms, 3 ranks 2 x 176 ms, 1 rank as is.
  c.host.busy_factor = 1.1;
  EXPECT_NEAR(predict(c, shape(2, 1)).compute_s, 0.176, 1e-12);
  EXPECT_NEAR(predict(c, shape(3, 1)).compute_s, 0.352, 1e-12);
  EXPECT_NEAR(predict(c, shape(1, 1)).compute_s, 0.16, 1e-12);
  EXPECT_NEAR(predict(c, shape(1, 1)).efficiency, 1.0, 1e-12);
}

TEST(PlanPredict, OwnCoresSlowOnlyWhenAHostsRanksFillThem) {
  Calibration c = hand_calibration();  // 2 cores per host, none shared
  c.host.busy_factor = 1.1;
  EXPECT_NEAR(predict(c, shape(8, 1)).compute_s, 0.16, 1e-12);  // a core to spare on each
  EXPECT_NEAR(predict(c, shape(8, 2, SyncPath::kHierarchical)).compute_s, 0.176, 1e-12);
  EXPECT_NEAR(predict(c, shape(8, 3, SyncPath::kHierarchical)).compute_s, 0.352, 1e-12);
}

TEST(PlanEfficiency, BoundCrossingIsWhereTheRingLatencyEatsTwentyPercent) {
  // No overlap (1 core), 1 MB of gradients, latency only: the ring costs
  // 2(n-1) ms, compute 100 ms. Efficiency 0.1 / (0.1 + 0.002(n-1)) >= 0.8
  // holds up to n - 1 = 12.5: 13 hosts.
  Calibration c = hand_calibration();
  c.host.cores = 1;
  c.profile = {};
  c.profile.model = "hand";
  c.profile.batch = 32;
  c.profile.backward_s = 0.1;
  c.profile.gradients = {{"w", 1e6, 0.1}};
  c.algorithms["direct"] = {1e-3, 0, 2, "given"};
  c.algorithms["ring"] = {1e-3, 0, 2, "given"};
  EXPECT_EQ(hosts_within_efficiency(c, shape(1, 1), 0.8, 1000), 13);
  EXPECT_GE(predict(c, shape(13, 1)).efficiency, 0.8);
  EXPECT_LT(predict(c, shape(14, 1)).efficiency, 0.8);
  // A bound nothing misses: the whole range.
  EXPECT_EQ(hosts_within_efficiency(c, shape(1, 1), 0.01, 50), 50);
  EXPECT_THROW(hosts_within_efficiency(c, shape(1, 1), 1.5, 50), Error);
}

TEST(PlanPredict, MoreHostsGiveMoreSamplesUntilTheLatencyBound) {
  // A 25 Gbit/s link with 20 us latency and the MLP's 80 MB: bandwidth per
  // rank stays flat on the ring, so samples/s grow with hosts while the
  // 2(n-1) latency terms stay small against compute.
  Calibration c = hand_calibration();
  c.profile.gradients = {{"fc3", 16e6, 0.03}, {"fc2", 64e6, 0.08}, {"fc1", 1e5, 0.1}};
  c.algorithms["direct"] = {20e-6, 8.0 / 25e9, 2, "given"};
  c.algorithms["ring"] = {20e-6, 8.0 / 25e9, 2, "given"};
  double last = 0;
  for (int h : {1, 2, 4, 8, 16, 64, 256, 1024}) {
    const Prediction p = predict(c, shape(h, 1));
    EXPECT_GT(p.samples_per_s, last) << h << " hosts";
    EXPECT_LE(p.efficiency, 1.0 + 1e-12);
    last = p.samples_per_s;
  }
  // Past the latency bound (4096 hosts: 0.16 s of ring latency) adding hosts costs.
  EXPECT_LT(predict(c, shape(8192, 1)).samples_per_s / 8192,
            predict(c, shape(1024, 1)).samples_per_s / 1024);
}

TEST(PlanInput, BadShapesPathsAndCompressionsAreNamed) {
  const Calibration c = hand_calibration();
  try {
    predict(c, shape(0, 1));
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("hosts and ranks per host must be at least 1"),
              std::string::npos);
  }
  try {
    predict(c, shape(2, 1, SyncPath::kFlat, "zip"));
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("unknown compression 'zip'"), std::string::npos);
  }
  EXPECT_THROW(compression_ratio("ratio:1.5"), Error);
  int k = 0;
  EXPECT_EQ(parse_path("ps:4", &k), SyncPath::kParameterServer);
  EXPECT_EQ(k, 4);
  EXPECT_EQ(parse_path("hier", nullptr), SyncPath::kHierarchical);
  EXPECT_THROW(parse_path("ps:0", &k), Error);
  try {
    parse_path("tree", &k);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("choose flat, hier or ps:K"), std::string::npos);
  }
  Calibration no_ring = c;
  no_ring.algorithms.erase("ring");
  try {
    predict(no_ring, shape(4, 1));
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("no 'ring' algorithm"), std::string::npos);
  }
  Calibration no_grads = c;
  no_grads.profile.gradients.clear();
  EXPECT_THROW(predict(no_grads, shape(2, 1)), Error);
}

}  // namespace
}  // namespace hpct::plan
