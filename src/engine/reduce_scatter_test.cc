// The engine's reduce-scatter (engine.h, reduce_scatter_async) on real Gloo
// ranks living as threads: uneven ranges, a rank that keeps nothing, a
// bucket mixed with allreduces, the bits of the allreduce of the same
// tensors, the bytes a rank sends, and a split that differs across ranks.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "comm/reduce.h"
#include "comm/testing/thread_world.h"
#include "engine/engine.h"

// A namespace of its own: the engine tests build as one unity file.
namespace hpct::engine::reduce_scatter_test {
namespace {

Logger quiet(int rank) {
  return Logger(LogLevel::kWarn, "all", rank, [](const std::string&) {});
}

// Values whose sums round, so a different summation order shows.
float value(int rank, int tensor, std::size_t i, int step) {
  return static_cast<float>(std::sin(0.71 * static_cast<double>(i) + rank + 3 * tensor + step) *
                            std::pow(10.0, static_cast<double>((i + rank) % 6)) / 7.0);
}

struct Case {
  std::size_t numel;
  std::vector<std::int64_t> split;  // for 3 ranks
};

// Rank 1 keeps nothing of t0, only rank 1 keeps t1, t2 is split unevenly.
const std::vector<Case> kCases = {{10, {0, 3, 3, 10}}, {7, {0, 0, 7, 7}}, {5, {0, 2, 4, 5}}, {1000, {0, 17, 512, 1000}}};

void world(int size, bool shm, EngineOptions o, const std::function<void(Engine&, int)>& fn) {
  comm::testing::run_gloo_world(
      size, Millis(20000),
      [&](comm::GlooCommunicator& c) {
        Engine e(c, o, quiet(c.rank()));
        fn(e, c.rank());
      },
      shm);
}

// Each rank's result: the reduction in rank order of every rank's values
// (comm/communicator.h), for its own range; the rest of an in-place tensor
// untouched; the tensors of one op fused into one reduce-scatter beside the
// allreduce.
TEST(EngineReduceScatter, FusedUnevenRangesARankWithNothingAndAnAllreduceBeside) {
  EngineOptions o;
  // No round until a rank waits (the wait flushes), and no rank waits
  // before every rank has submitted: each step is one round, one plan.
  o.cycle_ms = 5000;
  for (bool shm : {false, true}) {
    world(3, shm, o, [&](Engine& e, int rank) {
      for (int step = 0; step < 3; ++step) {
        const auto before = e.stats();
        std::vector<std::vector<float>> in(kCases.size()), out(kCases.size());
        std::vector<Handle> hs;
        for (std::size_t t = 0; t < kCases.size(); ++t) {
          const Case& c = kCases[t];
          for (std::size_t i = 0; i < c.numel; ++i) in[t].push_back(value(rank, static_cast<int>(t), i, step));
          out[t].assign(static_cast<std::size_t>(c.split[rank + 1] - c.split[rank]), -1.0f);
          const bool in_place = t == 3;
          hs.push_back(e.reduce_scatter_async(
              "g" + std::to_string(t),
              {in[t].data(), comm::DataType::kFloat32, {static_cast<std::int64_t>(c.numel)}, nullptr}, c.split,
              in_place ? nullptr : out[t].data(), t % 2 ? comm::ReduceOp::kSum : comm::ReduceOp::kAvg,
              Compression::kNone));
        }
        std::vector<float> a(33, static_cast<float>(rank + 1));
        auto ha = e.allreduce_async("a", {a.data(), comm::DataType::kFloat32, {33}, nullptr}, comm::ReduceOp::kSum,
                                    Compression::kNone);
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
        for (auto& h : hs) h.wait();
        ha.wait();
        for (float x : a) ASSERT_EQ(x, 6.0f);
        for (std::size_t t = 0; t < kCases.size(); ++t) {
          const Case& c = kCases[t];
          const auto lo = static_cast<std::size_t>(c.split[rank]), n = static_cast<std::size_t>(c.split[rank + 1]) - lo;
          std::vector<std::vector<float>> all(3);
          std::vector<const void*> blocks;
          for (int q = 0; q < 3; ++q) {
            for (std::size_t i = 0; i < c.numel; ++i) all[q].push_back(value(q, static_cast<int>(t), i, step));
            blocks.push_back(all[q].data() + lo);
          }
          std::vector<float> want(n);
          comm::reduce_in_order(want.data(), blocks, n, comm::DataType::kFloat32,
                                t % 2 ? comm::ReduceOp::kSum : comm::ReduceOp::kAvg);
          const float* got = t == 3 ? in[t].data() + lo : out[t].data();
          ASSERT_EQ(std::memcmp(got, want.data(), n * sizeof(float)), 0)
              << "tensor " << t << " rank " << rank << " step " << step << (shm ? " shm" : " tcp");
          if (t == 3) {  // in place: the other ranks' ranges are only read
            for (std::size_t i = 0; i < c.numel; ++i) {
              if (i < lo || i >= lo + n) {
                ASSERT_EQ(in[t][i], value(rank, 3, i, step)) << i;
              }
            }
          }
        }
        const auto after = e.stats();
        // Fused by op: one reduce-scatter of the averaged tensors, one of
        // the summed, and the allreduce.
        EXPECT_EQ(after.collectives - before.collectives, 3u) << "step " << step;
        std::size_t total = 0, mine = 0;
        for (const Case& c : kCases) {
          total += c.numel;
          mine += static_cast<std::size_t>(c.split[rank + 1] - c.split[rank]);
        }
        EXPECT_EQ(after.reduce_scatter_sent_bytes - before.reduce_scatter_sent_bytes, (total - mine) * 4);
        EXPECT_EQ(after.reduce_scatter_tensor_bytes - before.reduce_scatter_tensor_bytes, total * 4);
      }
    });
  }
}

// What stage 2 of sharding relies on: each rank's range has the bits the
// allreduce of the same tensors gives there, on the paths that sum in rank
// order (shared memory at any size; 2 ranks on the direct mesh; 3 ranks on
// it below the ring's threshold). fp16 on the wire too.
TEST(EngineReduceScatter, SameBitsAsTheAllreduceOfTheSameTensors) {
  struct Path {
    int size;
    bool shm;
    Compression compression;
  };
  for (const Path& p : {Path{2, false, Compression::kNone}, Path{3, false, Compression::kNone},
                        Path{3, true, Compression::kNone}, Path{4, true, Compression::kNone},
                        Path{3, false, Compression::kFp16}}) {
    world(p.size, p.shm, EngineOptions{}, [&](Engine& e, int rank) {
      const std::size_t numel = 3001;
      std::vector<std::int64_t> split;
      for (int q = 0; q <= p.size; ++q) split.push_back(static_cast<std::int64_t>(numel * q / p.size));
      std::vector<float> reduced(numel), scattered(numel);
      for (std::size_t i = 0; i < numel; ++i) reduced[i] = scattered[i] = value(rank, 0, i, 0);
      e.allreduce_async("ar", {reduced.data(), comm::DataType::kFloat32, {3001}, nullptr}, comm::ReduceOp::kAvg,
                        p.compression)
          .wait();
      e.reduce_scatter_async("rs", {scattered.data(), comm::DataType::kFloat32, {3001}, nullptr}, split, nullptr,
                             comm::ReduceOp::kAvg, p.compression)
          .wait();
      const auto lo = static_cast<std::size_t>(split[rank]);
      EXPECT_EQ(std::memcmp(scattered.data() + lo, reduced.data() + lo,
                            static_cast<std::size_t>(split[rank + 1] - split[rank]) * sizeof(float)),
                0)
          << p.size << " ranks" << (p.shm ? ", shm" : "") << ", " << compression_name(p.compression) << ", rank "
          << rank;
    });
  }
}

// Where the allreduce sums in another order (Gloo's ring: 3 ranks over TCP
// above 64 KiB), the reduce-scatter's rank-order sum differs from it by
// float rounding only: per element at most 2 (n - 1) units of rounding of
// the sum of the magnitudes (docs/sharding.md).
TEST(EngineReduceScatter, ElsewhereWithinFloatRoundingOfTheAllreduce) {
  world(3, false, EngineOptions{}, [&](Engine& e, int rank) {
    const std::size_t numel = 100000;  // 400 KB: the ring
    const std::vector<std::int64_t> split = {0, 33333, 66666, 100000};
    std::vector<float> reduced(numel), scattered(numel);
    for (std::size_t i = 0; i < numel; ++i) reduced[i] = scattered[i] = value(rank, 1, i, 0);
    e.allreduce_async("ar", {reduced.data(), comm::DataType::kFloat32, {100000}, nullptr}, comm::ReduceOp::kSum,
                      Compression::kNone)
        .wait();
    e.reduce_scatter_async("rs", {scattered.data(), comm::DataType::kFloat32, {100000}, nullptr}, split, nullptr,
                           comm::ReduceOp::kSum, Compression::kNone)
        .wait();
    std::size_t differ = 0;
    for (auto i = static_cast<std::size_t>(split[rank]); i < static_cast<std::size_t>(split[rank + 1]); ++i) {
      double magnitude = 0;
      for (int q = 0; q < 3; ++q) magnitude += std::fabs(value(q, 1, i, 0));
      const double bound = 2 * 2 * magnitude * std::numeric_limits<float>::epsilon() / 2;
      ASSERT_LE(std::fabs(static_cast<double>(scattered[i]) - reduced[i]), bound) << "element " << i;
      differ += scattered[i] != reduced[i];
    }
    std::printf("rank %d: %zu of %lld elements differ from the ring allreduce in the last bits\n", rank, differ,
                static_cast<long long>(split[rank + 1] - split[rank]));
  });
}

TEST(EngineReduceScatter, SplitThatDiffersAcrossRanksIsAMismatchOnEveryRank) {
  std::atomic<int> raised{0};
  world(3, false, EngineOptions{}, [&](Engine& e, int rank) {
    std::vector<float> v(9, 1.0f), out(9);
    std::vector<std::int64_t> split = rank == 2 ? std::vector<std::int64_t>{0, 4, 6, 9}
                                                : std::vector<std::int64_t>{0, 3, 6, 9};
    auto h = e.reduce_scatter_async("layer.grad", {v.data(), comm::DataType::kFloat32, {9}, nullptr}, split,
                                    out.data(), comm::ReduceOp::kSum);
    try {
      h.wait();
      ADD_FAILURE() << "no mismatch on rank " << rank;
    } catch (const Error& err) {
      EXPECT_EQ(err.code(), ErrorCode::kMismatch);
      const std::string m = err.what();
      EXPECT_NE(m.find("rank 2: reduce_scatter float32 sum none [9] split [0, 4, 6, 9]"), std::string::npos) << m;
      EXPECT_NE(m.find("rank 0: reduce_scatter float32 sum none [9] split [0, 3, 6, 9]"), std::string::npos) << m;
      ++raised;
    }
    // A bad split is refused at once, naming the rule.
    try {
      e.reduce_scatter_async("bad", {v.data(), comm::DataType::kFloat32, {9}, nullptr}, {0, 5, 4, 9}, nullptr,
                             comm::ReduceOp::kSum);
      ADD_FAILURE() << "decreasing split accepted";
    } catch (const Error& err) {
      EXPECT_EQ(err.code(), ErrorCode::kInvalidArgument);
      EXPECT_NE(std::string(err.what()).find("non-decreasing offsets from 0 to its 9 elements"), std::string::npos)
          << err.what();
    }
  });
  EXPECT_EQ(raised.load(), 3);
}

}  // namespace
}  // namespace hpct::engine::reduce_scatter_test
