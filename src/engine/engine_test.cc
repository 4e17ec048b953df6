// The engine on real Gloo ranks living as threads of this process
// (comm/testing/thread_world.h): results, any submission order, fusion and
// compression, errors that name the tensor and ranks, stalls, shutdown, the
// timeline file.
#include "engine/engine.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <fstream>
#include <random>
#include <set>
#include <thread>

#include <nlohmann/json.hpp>

#include "comm/testing/thread_world.h"

namespace hpct::engine {
namespace {

using comm::testing::run_gloo_world;

Logger quiet(int rank) {
  return Logger(LogLevel::kWarn, "all", rank, [](const std::string&) {});
}

EngineOptions fast_options() {
  EngineOptions o;
  o.cycle_ms = 1;
  o.stall_warn_s = 2;
  return o;
}

// float32 tensor of n elements filled with f(i).
struct Buf {
  std::vector<float> v;
  TensorRef ref() { return {v.data(), comm::DataType::kFloat32, {static_cast<std::int64_t>(v.size())}, nullptr}; }
};

void run_world(int size, const EngineOptions& o, const std::function<void(Engine&, int)>& fn,
               std::function<Logger(int)> logger = quiet) {
  run_gloo_world(size, Millis(20000), [&](comm::GlooCommunicator& c) {
    Engine e(c, o, logger(c.rank()));
    fn(e, c.rank());
  });
}

// Every rank allreduces `n` tensors of various sizes in an order of its own;
// checks the sums and averages.
void check_allreduce(int size, EngineOptions o, int order_kind, std::size_t max_len = 3000) {
  run_world(size, o, [&](Engine& e, int rank) {
    const int n = 24;
    for (int step = 0; step < 3; ++step) {
      std::vector<Buf> bufs(n);
      std::vector<int> order(n);
      for (int i = 0; i < n; ++i) {
        order[static_cast<size_t>(i)] = i;
        bufs[static_cast<size_t>(i)].v.resize(1 + (static_cast<size_t>(i) * 131) % max_len);
        for (size_t k = 0; k < bufs[static_cast<size_t>(i)].v.size(); ++k) {
          bufs[static_cast<size_t>(i)].v[k] = static_cast<float>(rank + 1) * static_cast<float>(k % 7 + i);
        }
      }
      if (order_kind == 1 && rank % 2 == 1) std::reverse(order.begin(), order.end());
      if (order_kind == 2) std::shuffle(order.begin(), order.end(), std::mt19937(rank * 7 + step));
      std::vector<Handle> hs(n);
      for (int i : order) {
        auto op = i % 2 ? comm::ReduceOp::kAvg : comm::ReduceOp::kSum;
        hs[static_cast<size_t>(i)] = e.allreduce_async("t" + std::to_string(i), bufs[static_cast<size_t>(i)].ref(), op);
      }
      const float ranks_sum = static_cast<float>(size * (size + 1)) / 2.0f;
      for (int i = 0; i < n; ++i) {
        hs[static_cast<size_t>(i)].wait();
        float factor = i % 2 ? ranks_sum / static_cast<float>(size) : ranks_sum;
        const auto& v = bufs[static_cast<size_t>(i)].v;
        for (size_t k = 0; k < v.size(); ++k) {
          float want = factor * static_cast<float>(k % 7 + i);
          float tol = o.compression == Compression::kNone ? 1e-4f : 1e-2f * want + 1e-2f;
          ASSERT_NEAR(v[k], want, tol) << "tensor " << i << " element " << k << " rank " << rank;
        }
      }
    }
  });
}

TEST(Engine, AllreduceInOrderFusedAndNot) {
  for (int size : {1, 2, 3}) {
    auto o = fast_options();
    check_allreduce(size, o, 0);
    o.fusion_bytes = 0;
    check_allreduce(size, o, 0);
  }
}

TEST(Engine, ReversedAndRandomOrderComplete) {
  for (int size : {2, 4}) {
    check_allreduce(size, fast_options(), 1);
    check_allreduce(size, fast_options(), 2);
  }
}

TEST(Engine, Compression) {
  for (auto c : {Compression::kFp16, Compression::kBf16}) {
    auto o = fast_options();
    o.compression = c;
    check_allreduce(2, o, 2, 500);
  }
}

TEST(Engine, AdjacentTensorsGoInPlaceAndCacheSkipsNegotiation) {
  run_world(2, fast_options(), [](Engine& e, int rank) {
    std::vector<float> flat(300, static_cast<float>(rank + 1));
    const int steps = 20;
    for (int s = 0; s < steps; ++s) {
      std::fill(flat.begin(), flat.end(), static_cast<float>(rank + 1));
      std::vector<Handle> hs;
      for (int i = 0; i < 3; ++i) {
        hs.push_back(e.allreduce_async("p" + std::to_string(i),
                                       {flat.data() + 100 * i, comm::DataType::kFloat32, {100}, nullptr},
                                       comm::ReduceOp::kSum));
      }
      for (auto& h : hs) h.wait();
      for (float x : flat) ASSERT_EQ(x, 3.0f);
    }
    auto st = e.stats();
    EXPECT_GT(st.in_place_bytes, 0u);
    // After the first step (full negotiation) the cache carries the steady state.
    EXPECT_LT(st.full_rounds, st.rounds);
  });
}

TEST(Engine, BroadcastAndAllgather) {
  run_world(3, fast_options(), [](Engine& e, int rank) {
    std::vector<std::int32_t> b(5, rank == 1 ? 42 : -1);
    auto hb = e.broadcast_async("b", {b.data(), comm::DataType::kInt32, {5}, nullptr}, 1);
    // Rank r contributes r+1 rows of 2 int64.
    std::vector<std::int64_t> rows(static_cast<size_t>(2 * (rank + 1)), rank);
    auto hg = e.allgather_async("g", {rows.data(), comm::DataType::kInt64, {rank + 1, 2}, nullptr});
    hg.wait();
    hb.wait();
    for (auto x : b) EXPECT_EQ(x, 42);
    EXPECT_EQ(hg.gathered_shape(), (std::vector<std::int64_t>{6, 2}));
    const auto* g = reinterpret_cast<const std::int64_t*>(hg.gathered().data());
    std::vector<std::int64_t> want = {0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 2, 2};
    EXPECT_EQ(std::vector<std::int64_t>(g, g + 12), want);
  });
}

TEST(Engine, ShapeMismatchNamesTensorRanksAndShapesOnEveryRank) {
  std::atomic<int> raised{0};
  run_world(3, fast_options(), [&](Engine& e, int rank) {
    std::vector<float> v(rank == 2 ? 6 : 4, 1.0f);
    std::vector<std::int64_t> shape = rank == 2 ? std::vector<std::int64_t>{2, 3}
                                                : std::vector<std::int64_t>{2, 2};
    auto h = e.allreduce_async("layer1.weight", {v.data(), comm::DataType::kFloat32, shape, nullptr},
                               comm::ReduceOp::kSum);
    std::vector<float> ok(3, 1.0f);
    auto h2 = e.allreduce_async("fine", {ok.data(), comm::DataType::kFloat32, {3}, nullptr},
                                comm::ReduceOp::kSum);
    try {
      h.wait();
      ADD_FAILURE() << "no mismatch raised on rank " << rank;
    } catch (const Error& err) {
      EXPECT_EQ(err.code(), ErrorCode::kMismatch);
      std::string m = err.what();
      EXPECT_NE(m.find("layer1.weight"), std::string::npos) << m;
      EXPECT_NE(m.find("rank 0: allreduce float32 sum none [2, 2]"), std::string::npos) << m;
      EXPECT_NE(m.find("rank 2: allreduce float32 sum none [2, 3]"), std::string::npos) << m;
      ++raised;
    }
    h2.wait();  // the engine goes on
    EXPECT_EQ(ok[0], 3.0f);
  });
  EXPECT_EQ(raised.load(), 3);
}

TEST(Engine, StallWarnsNamingTensorAndMissingRanksThenAborts) {
  std::mutex mu;
  std::vector<std::string> lines;
  auto capture = [&](int rank) {
    return Logger(LogLevel::kWarn, "all", rank, [&](const std::string& l) {
      std::lock_guard<std::mutex> lk(mu);
      lines.push_back(l);
    });
  };
  auto o = fast_options();
  o.stall_warn_s = 0.2;
  o.stall_abort_s = 0.8;
  run_world(3, o, [&](Engine& e, int rank) {
    std::vector<float> v(4, 1.0f);
    if (rank != 1) {
      auto h = e.allreduce_async("lonely", {v.data(), comm::DataType::kFloat32, {4}, nullptr},
                                 comm::ReduceOp::kSum);
      try {
        h.wait(Millis(10000));
        ADD_FAILURE() << "stalled tensor completed";
      } catch (const Error& err) {
        EXPECT_EQ(err.code(), ErrorCode::kTimeout) << err.what();
        EXPECT_NE(std::string(err.what()).find("not by ranks [1]"), std::string::npos) << err.what();
      }
    } else {
      std::this_thread::sleep_for(Millis(1200));
    }
  }, capture);
  bool warned = false;
  for (const auto& l : lines) {
    warned = warned || (l.find("stall") != std::string::npos &&
                        l.find("'lonely'") != std::string::npos &&
                        l.find("submitted by ranks [0, 2] but not by ranks [1]") != std::string::npos);
  }
  std::string all;
  for (const auto& l : lines) all += l;
  EXPECT_TRUE(warned) << "no stall warning among " << lines.size() << " lines:\n" << all;
}

// A tensor one rank never submits, with nothing but HPCT_TIMEOUT_S set: the
// plain wait() (no timeout of its own) ends within the bound on the rank
// that submitted it, with Timeout naming the tensor and the rank that did
// not; the other rank's own lonely tensor fails the same way; and the next
// collective of both ranks works.
TEST(Engine, TensorNeverSubmittedByOneRankFailsWithinHpctTimeoutAndTheNextWorks) {
  Config c;
  c.cycle_ms = 1;
  c.timeout_s = 2;
  const auto o = EngineOptions::from_config(c);
  EXPECT_EQ(o.stall_abort_s, 2.0);  // HPCT_STALL_ABORT_S unset: the communication timeout
  EXPECT_LE(o.stall_warn_s, 1.0);   // and a warning before it
  run_world(2, o, [&](Engine& e, int rank) {
    std::vector<float> v(4, 1.0f);
    const std::string mine = rank == 0 ? "x" : "other";
    const auto start = SteadyClock::now();
    auto h = e.allreduce_async(mine, {v.data(), comm::DataType::kFloat32, {4}, nullptr},
                               comm::ReduceOp::kSum);
    try {
      h.wait();
      ADD_FAILURE() << "rank " << rank << ": '" << mine << "' completed though the other rank never sent it";
    } catch (const Error& err) {
      const double waited = std::chrono::duration<double>(SteadyClock::now() - start).count();
      EXPECT_EQ(err.code(), ErrorCode::kTimeout) << err.what();
      EXPECT_NE(std::string(err.what()).find("'" + mine + "'"), std::string::npos) << err.what();
      EXPECT_NE(std::string(err.what()).find("not by ranks [" + std::to_string(1 - rank) + "]"),
                std::string::npos)
          << err.what();
      EXPECT_GE(waited, 1.9);
      EXPECT_LT(waited, 6.0) << "the bound is 2 s";
    }
    std::vector<float> next(4, static_cast<float>(rank + 1));
    e.allreduce_async("next", {next.data(), comm::DataType::kFloat32, {4}, nullptr}, comm::ReduceOp::kSum)
        .wait(Millis(10000));
    EXPECT_EQ(next[0], 3.0f);
  });
}

// int8 and int16 tensors travel, and an integer average truncates toward
// zero (Horovod's): (-7 + 2) / 2 is -2.
TEST(Engine, SmallIntegersAndIntegerAverage) {
  run_world(2, fast_options(), [&](Engine& e, int rank) {
    std::vector<std::int8_t> a = {static_cast<std::int8_t>(rank == 0 ? -7 : 2), 50};
    std::vector<std::int16_t> b = {static_cast<std::int16_t>(rank == 0 ? -30000 : -1), 3};
    auto ha = e.allreduce_async("i8", {a.data(), comm::DataType::kInt8, {2}, nullptr}, comm::ReduceOp::kAvg);
    auto hb = e.allreduce_async("i16", {b.data(), comm::DataType::kInt16, {2}, nullptr}, comm::ReduceOp::kAvg);
    ha.wait(Millis(10000));
    hb.wait(Millis(10000));
    EXPECT_EQ(a[0], -2);
    EXPECT_EQ(a[1], 50);
    EXPECT_EQ(b[0], -15000);
    EXPECT_EQ(b[1], 3);
  });
}

TEST(Engine, LateRankCompletesAfterWarning) {
  auto o = fast_options();
  o.stall_warn_s = 0.1;
  run_world(2, o, [&](Engine& e, int rank) {
    if (rank == 1) std::this_thread::sleep_for(Millis(400));
    std::vector<float> v(4, 1.0f);
    e.allreduce_async("late", {v.data(), comm::DataType::kFloat32, {4}, nullptr}, comm::ReduceOp::kSum)
        .wait(Millis(10000));
    EXPECT_EQ(v[0], 2.0f);
  });
}

TEST(Engine, ShutdownWithWorkPendingFailsHandlesOnEveryRank) {
  std::atomic<int> failed{0};
  run_world(2, fast_options(), [&](Engine& e, int rank) {
    std::vector<float> v(4, 1.0f);
    Handle h;
    if (rank == 0) {
      h = e.allreduce_async("never", {v.data(), comm::DataType::kFloat32, {4}, nullptr},
                            comm::ReduceOp::kSum);
    }
    std::this_thread::sleep_for(Millis(50));
    auto t0 = SteadyClock::now();
    if (rank == 1) e.shutdown();
    if (rank == 0) {
      EXPECT_THROW(h.wait(Millis(5000)), Error);
      ++failed;
      // Later submissions fail as the peer's doing (elastic jobs retry on
      // it), naming the rank that shut down.
      try {
        e.allreduce_async("after", {v.data(), comm::DataType::kFloat32, {4}, nullptr},
                          comm::ReduceOp::kSum);
        ADD_FAILURE() << "a submission after rank 1's shutdown was accepted";
      } catch (const Error& err) {
        EXPECT_EQ(err.code(), ErrorCode::kPeerFailure) << err.what();
        EXPECT_NE(std::string(err.what()).find("shut down by rank 1"), std::string::npos)
            << err.what();
      }
    }
    EXPECT_LT(SteadyClock::now() - t0, std::chrono::seconds(3));
  });
  EXPECT_EQ(failed.load(), 1);
}

TEST(Engine, DuplicatePendingNameIsRefused) {
  run_world(1, fast_options(), [](Engine& e, int) {
    std::vector<float> v(4, 1.0f);
    TensorRef t{v.data(), comm::DataType::kFloat32, {4}, nullptr};
    auto h = e.allreduce_async("x", t, comm::ReduceOp::kSum);
    // The single rank may already have finished; resubmitting after wait() is fine.
    h.wait();
    e.allreduce_async("x", t, comm::ReduceOp::kSum).wait();
  });
}

TEST(Engine, TimelineIsChromeTraceWithEveryPhase) {
  std::string path = ::testing::TempDir() + "engine_timeline_test.json";
  std::remove(path.c_str());
  auto o = fast_options();
  o.timeline_path = path;
  run_world(2, o, [](Engine& e, int rank) {
    std::vector<float> a(10, 1.0f), b(20, 1.0f);
    for (int s = 0; s < 3; ++s) {
      auto h1 = e.allreduce_async("grad/a", {a.data(), comm::DataType::kFloat32, {10}, nullptr},
                                  comm::ReduceOp::kSum);
      auto h2 = e.allreduce_async("grad/b", {b.data(), comm::DataType::kFloat32, {20}, nullptr},
                                  comm::ReduceOp::kSum);
      h1.wait();
      h2.wait();
    }
    (void)rank;
  });
  std::ifstream in(path);
  ASSERT_TRUE(in.good()) << path;
  nlohmann::json j = nlohmann::json::parse(in);
  ASSERT_TRUE(j["traceEvents"].is_array());
  std::set<std::string> phases, tracks;
  for (const auto& ev : j["traceEvents"]) {
    if (ev["ph"] == "M") {
      tracks.insert(ev["args"]["name"].get<std::string>());
      continue;
    }
    EXPECT_EQ(ev["ph"], "X");
    EXPECT_TRUE(ev["ts"].is_number());
    EXPECT_GE(ev["dur"].get<double>(), 0.0);
    phases.insert(ev["name"].get<std::string>());
  }
  EXPECT_EQ(phases, (std::set<std::string>{"queued", "negotiated", "fused", "communicated", "done"}));
  EXPECT_EQ(tracks, (std::set<std::string>{"grad/a", "grad/b"}));
}

// ---- compression auto ----

TEST(AutoCompressionRule, KeepsFloat32UnlessFloat16IsClearlyFaster) {
  EXPECT_EQ(AutoCompression::rule(100, 50), Compression::kFp16);
  EXPECT_EQ(AutoCompression::rule(100, 89), Compression::kFp16);
  EXPECT_EQ(AutoCompression::rule(100, 95), Compression::kNone);  // within noise: keep float32
  EXPECT_EQ(AutoCompression::rule(100, 300), Compression::kNone);
  EXPECT_EQ(parse_compression("auto"), Compression::kAuto);
  EXPECT_STREQ(compression_name(Compression::kAuto), "auto");
}

// Sizes 0, 1, odd, under the probe threshold, and large (probed); sum and avg.
// Returns each rank's results, to compare across ranks.
std::vector<std::vector<std::vector<float>>> run_auto(int size, bool shm, bool hosts_apart,
                                                      std::vector<std::vector<std::pair<int, AutoCompression::Decision>>>* decisions,
                                                      std::vector<Engine::Stats>* stats) {
  const std::vector<std::size_t> lens = {0, 1, 7, 1001, (1u << 20) + 3, 300000};
  std::vector<std::vector<std::vector<float>>> out(static_cast<size_t>(size));
  decisions->assign(static_cast<size_t>(size), {});
  stats->assign(static_cast<size_t>(size), {});
  EngineOptions o = fast_options();
  o.compression = Compression::kAuto;
  comm::testing::run_gloo_world(
      size, Millis(60000),
      [&](comm::GlooCommunicator& c) {
        EngineOptions mine = o;
        // Threads of one process are one host; hosts_apart makes each rank its own.
        if (hosts_apart) mine.host_identity = [r = c.rank()] { return std::int64_t{r}; };
        Engine e(c, mine, quiet(c.rank()));
        const int rank = c.rank();
        std::vector<Buf> bufs(lens.size());
        for (int step = 0; step < 2; ++step) {
          std::vector<Handle> hs;
          for (size_t i = 0; i < lens.size(); ++i) {
            bufs[i].v.assign(lens[i], 0.0f);
            for (size_t k = 0; k < lens[i]; ++k) {
              bufs[i].v[k] = static_cast<float>(rank + 1) * static_cast<float>(k % 13) * 0.25f;
            }
            auto op = i % 2 ? comm::ReduceOp::kAvg : comm::ReduceOp::kSum;
            hs.push_back(e.allreduce_async("t" + std::to_string(i), bufs[i].ref(), op));
            hs.back().wait();  // one allreduce per size: each size meets the policy alone
          }
        }
        for (auto& b : bufs) out[static_cast<size_t>(rank)].push_back(b.v);
        (*decisions)[static_cast<size_t>(rank)] = e.auto_compression_decisions();
        (*stats)[static_cast<size_t>(rank)] = e.stats();
      },
      shm);
  // The values a user computes by hand: float32 exactly; float16 within its rounding.
  const float ranks_sum = static_cast<float>(size * (size + 1)) / 2.0f;
  for (size_t i = 0; i < lens.size(); ++i) {
    const float factor = i % 2 ? ranks_sum / static_cast<float>(size) : ranks_sum;
    for (size_t k = 0; k < lens[i]; ++k) {
      const float want = factor * static_cast<float>(k % 13) * 0.25f;
      const float got = out[0][i][k];
      EXPECT_NEAR(got, want, 2e-3f * want + 1e-6f) << "tensor " << i << " element " << k;
      if (::testing::Test::HasFailure()) return out;
    }
  }
  return out;
}

TEST(EngineAutoCompression, OverTcpProbesOnceAndEveryRankDecidesAndEndsAlike) {
  for (int size : {2, 3}) {
    std::vector<std::vector<std::pair<int, AutoCompression::Decision>>> d;
    std::vector<Engine::Stats> st;
    auto out = run_auto(size, false, true, &d, &st);
    // Probed: the large tensors' classes (2^22 and 2^20 bytes), not the small ones.
    ASSERT_EQ(d[0].size(), 2u) << size;
    for (const auto& [cls, dec] : d[0]) {
      EXPECT_GE(cls, 16);
      EXPECT_GT(dec.none_ms, 0);
      EXPECT_GT(dec.fp16_ms, 0);
      EXPECT_EQ(dec.choice, AutoCompression::rule(dec.none_ms, dec.fp16_ms));
    }
    for (int r = 1; r < size; ++r) {
      ASSERT_EQ(d[static_cast<size_t>(r)].size(), d[0].size());
      for (size_t i = 0; i < d[0].size(); ++i) {
        EXPECT_EQ(d[static_cast<size_t>(r)][i].second.choice, d[0][i].second.choice);
        EXPECT_EQ(d[static_cast<size_t>(r)][i].second.none_ms, d[0][i].second.none_ms);
      }
      EXPECT_EQ(out[static_cast<size_t>(r)], out[0]) << "rank " << r << " ended with other bits";
      EXPECT_EQ(st[static_cast<size_t>(r)].compressed_collectives, st[0].compressed_collectives);
    }
    // Only probed classes can have gone compressed: 2 tensors x 2 steps at most.
    std::uint64_t fp16_classes = 0;
    for (const auto& [cls, dec] : d[0]) fp16_classes += dec.choice == Compression::kFp16;
    EXPECT_EQ(st[0].compressed_collectives, 2 * fp16_classes);
  }
}

TEST(EngineAutoCompression, SharedMemoryNeverCompressesNorProbes) {
  std::vector<std::vector<std::pair<int, AutoCompression::Decision>>> d;
  std::vector<Engine::Stats> st;
  auto out = run_auto(2, true, true, &d, &st);
  EXPECT_TRUE(d[0].empty());
  EXPECT_EQ(st[0].compressed_collectives, 0u);
  EXPECT_EQ(out[0], out[1]);
}

// Ranks on one host that talk over TCP (Gloo's ring, or MPI without the
// shared-memory path) count as one host all the same: no probe, no casts.
TEST(EngineAutoCompression, RanksOfOneHostOverTcpNeverCompress) {
  std::vector<std::vector<std::pair<int, AutoCompression::Decision>>> d;
  std::vector<Engine::Stats> st;
  auto out = run_auto(3, false, false, &d, &st);
  for (int r = 0; r < 3; ++r) {
    EXPECT_TRUE(d[static_cast<size_t>(r)].empty());
    EXPECT_EQ(st[static_cast<size_t>(r)].compressed_collectives, 0u);
  }
  EXPECT_EQ(out[0], out[2]);
}

}  // namespace
}  // namespace hpct::engine
