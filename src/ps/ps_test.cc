// Parameter servers and workers as threads in one process, over real
// loopback TCP with net's handshake: exact sums, shapes, faults,
// staleness, uneven epochs.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <functional>
#include <mutex>
#include <numeric>
#include <set>
#include <thread>

#include "core/error.h"
#include "ps/client.h"
#include "ps/server.h"

namespace hpct::ps {
namespace {

const std::string kSecret = "ps-test-secret-0123456789abcdef";

// K servers on threads; run() results kept for the test to inspect.
class ServerSet {
 public:
  ServerSet(int k, int workers, Mode mode, int staleness, Millis idle = Millis(20000),
            bool mac = false) {
    for (int s = 0; s < k; ++s) {
      ServerOptions o;
      o.rank = s;
      o.num_workers = workers;
      o.secret = kSecret;
      o.host_name = "host" + std::to_string(s);
      o.idle_timeout = idle;
      o.mac_frames = mac;
      o.logger = Logger(LogLevel::kError, "all", -1);
      servers_.push_back(std::make_unique<Server>(o));
    }
    mode_ = mode;
    staleness_ = staleness;
    errors_.resize(static_cast<size_t>(k));
    for (int s = 0; s < k; ++s) {
      threads_.emplace_back([this, s] {
        try {
          servers_[static_cast<size_t>(s)]->run();
        } catch (const std::exception& e) {
          errors_[static_cast<size_t>(s)] = e.what();
        }
      });
    }
  }
  ~ServerSet() {
    for (auto& s : servers_) s->stop();
    join();
  }
  void join() {
    for (auto& t : threads_) {
      if (t.joinable()) t.join();
    }
  }
  Server& server(int s) { return *servers_[static_cast<size_t>(s)]; }
  const std::string& error(int s) const { return errors_[static_cast<size_t>(s)]; }

  ClientOptions client_options(int rank, int workers, std::uint64_t piece_bytes,
                               Millis timeout = Millis(20000), bool mac = false) const {
    ClientOptions c;
    c.rank = rank;
    c.num_workers = workers;
    c.secret = kSecret;
    c.host_name = "worker-host" + std::to_string(rank);
    c.piece_bytes = piece_bytes;
    c.timeout = timeout;
    c.connect_timeout = Millis(10000);
    c.mac_frames = mac;
    c.mode = mode_;
    c.staleness = staleness_;
    for (size_t s = 0; s < servers_.size(); ++s) {
      c.servers.push_back({static_cast<int>(s), "host" + std::to_string(s), "127.0.0.1",
                           servers_[s]->port()});
    }
    return c;
  }

 private:
  std::vector<std::unique_ptr<Server>> servers_;
  std::vector<std::thread> threads_;
  std::vector<std::string> errors_;
  Mode mode_ = Mode::kSync;
  int staleness_ = 0;
};

// Runs fn(rank) on n threads; returns each thread's error text ("" if none).
std::vector<std::string> run_workers(int n, const std::function<void(int)>& fn) {
  std::vector<std::string> errors(static_cast<size_t>(n));
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      try {
        fn(r);
      } catch (const std::exception& e) {
        errors[static_cast<size_t>(r)] = e.what();
      }
    });
  }
  for (auto& t : threads) t.join();
  return errors;
}

// Integer tensors of awkward sizes: empty, one element, odd, and one that
// spans many pieces at the test's small piece size.
std::vector<TensorSpec> mixed_tensors() {
  return {{"conv.weight", DataType::kInt32, 1000},
          {"conv.bias", DataType::kInt64, 1},
          {"empty", DataType::kInt32, 0},
          {"fc.weight", DataType::kFloat32, 2501},  // integers below 2^24: exact in float32
          {"fc.bias", DataType::kFloat64, 7}};
}

template <typename T>
T value_of(int rank, std::uint64_t i, int step) {
  return static_cast<T>((rank + 1) * 1000 + static_cast<std::int64_t>(i % 97) * (step + 1) -
                        static_cast<std::int64_t>(rank * 3));
}

struct Buffers {
  std::vector<std::vector<char>> data;
  std::vector<const void*> in() const {
    std::vector<const void*> v;
    for (auto& d : data) v.push_back(d.data());
    return v;
  }
  std::vector<void*> out() {
    std::vector<void*> v;
    for (auto& d : data) v.push_back(d.data());
    return v;
  }
};

Buffers fill(const std::vector<TensorSpec>& specs, int rank, int step) {
  Buffers b;
  for (const auto& t : specs) {
    std::vector<char> d(t.elements * dtype_size(t.dtype));
    for (std::uint64_t i = 0; i < t.elements; ++i) {
      switch (t.dtype) {
        case DataType::kInt32: {
          auto v = value_of<std::int32_t>(rank, i, step);
          std::memcpy(d.data() + i * 4, &v, 4);
          break;
        }
        case DataType::kInt64: {
          auto v = value_of<std::int64_t>(rank, i, step);
          std::memcpy(d.data() + i * 8, &v, 8);
          break;
        }
        case DataType::kFloat32: {
          auto v = value_of<float>(rank, i, step);
          std::memcpy(d.data() + i * 4, &v, 4);
          break;
        }
        case DataType::kFloat64: {
          auto v = value_of<double>(rank, i, step);
          std::memcpy(d.data() + i * 8, &v, 8);
          break;
        }
        default:
          ADD_FAILURE() << "no test values for " << dtype_name(t.dtype);
      }
    }
    b.data.push_back(std::move(d));
  }
  return b;
}

// The expected sum over ranks in `ranks`, as bytes.
Buffers expected_sum(const std::vector<TensorSpec>& specs, const std::vector<int>& ranks,
                     int step) {
  Buffers sum = fill(specs, ranks[0], step);
  for (size_t k = 1; k < ranks.size(); ++k) {
    Buffers b = fill(specs, ranks[k], step);
    for (size_t t = 0; t < specs.size(); ++t) {
      std::vector<const void*> srcs = {sum.data[t].data(), b.data[t].data()};
      sum_in_order(specs[t].dtype, sum.data[t].data(), srcs, specs[t].elements);
    }
  }
  return sum;
}

TEST(PsPlan, PiecesCoverEveryTensorAndSpreadOverServers) {
  auto specs = mixed_tensors();
  auto plan = plan_pieces(specs, 1000, 3);
  std::vector<std::uint64_t> covered(specs.size(), 0);
  std::vector<int> per_server(3, 0);
  for (const auto& p : plan) {
    EXPECT_EQ(p.offset_bytes, covered[static_cast<size_t>(p.tensor)]);
    EXPECT_LE(p.bytes, 1000u);
    covered[static_cast<size_t>(p.tensor)] += p.bytes;
    ++per_server[static_cast<size_t>(p.server)];
  }
  for (size_t t = 0; t < specs.size(); ++t) {
    EXPECT_EQ(covered[t], specs[t].elements * dtype_size(specs[t].dtype)) << specs[t].name;
  }
  for (int s = 0; s < 3; ++s) EXPECT_GT(per_server[static_cast<size_t>(s)], 2) << "server " << s;
}

// Exact integer sums over 1-4 workers and 1-3 servers, pieces split across
// servers, three steps each, the same bits on every worker.
TEST(PsSync, ExactIntegerSumsOverWorkersAndServers) {
  const auto specs = mixed_tensors();
  for (int servers = 1; servers <= 3; ++servers) {
    for (int workers = 1; workers <= 4; ++workers) {
      SCOPED_TRACE(std::to_string(workers) + " workers, " + std::to_string(servers) + " servers");
      ServerSet set(servers, workers, Mode::kSync, 0);
      std::vector<int> all(static_cast<size_t>(workers));
      std::iota(all.begin(), all.end(), 0);
      std::mutex mu;
      std::vector<std::string> failures;
      auto errors = run_workers(workers, [&](int rank) {
        Client client(set.client_options(rank, workers, 1000));
        client.register_tensors(specs, {});
        std::set<int> used;
        for (const auto& p : client.pieces()) used.insert(p.server);
        if (static_cast<int>(used.size()) != servers) {
          std::lock_guard<std::mutex> lock(mu);
          failures.push_back("pieces on " + std::to_string(used.size()) + " servers");
        }
        for (int step = 0; step < 3; ++step) {
          Buffers b = fill(specs, rank, step);
          const int count = client.exchange(b.in(), b.out());  // in place
          Buffers want = expected_sum(specs, all, step);
          std::lock_guard<std::mutex> lock(mu);
          if (count != workers) failures.push_back("count " + std::to_string(count));
          for (size_t t = 0; t < specs.size(); ++t) {
            if (b.data[t] != want.data[t]) {
              failures.push_back("rank " + std::to_string(rank) + " step " +
                                 std::to_string(step) + " tensor " + specs[t].name);
            }
          }
        }
        client.leave({});
      });
      set.join();
      for (int r = 0; r < workers; ++r) EXPECT_EQ(errors[static_cast<size_t>(r)], "") << r;
      for (int s = 0; s < servers; ++s) EXPECT_EQ(set.error(s), "") << "server " << s;
      EXPECT_TRUE(failures.empty()) << failures.front();
    }
  }
}

TEST(PsSync, FramesWithMacsSumExactly) {
  const auto specs = mixed_tensors();
  ServerSet set(2, 2, Mode::kSync, 0, Millis(20000), /*mac=*/true);
  std::vector<Buffers> got(2);
  auto errors = run_workers(2, [&](int rank) {
    Client client(set.client_options(rank, 2, 1000, Millis(20000), /*mac=*/true));
    client.register_tensors(specs, {});
    Buffers b = fill(specs, rank, 0);
    client.exchange(b.in(), b.out());
    got[static_cast<size_t>(rank)] = b;
  });
  EXPECT_EQ(errors[0], "");
  EXPECT_EQ(errors[1], "");
  EXPECT_EQ(got[0].data, expected_sum(specs, {0, 1}, 0).data);
  EXPECT_EQ(got[1].data, got[0].data);
}

TEST(PsSync, AMacChoiceThatDiffersFromTheServersIsRefusedByName) {
  ServerSet set(1, 1, Mode::kSync, 0, Millis(5000), /*mac=*/false);
  try {
    Client client(set.client_options(0, 1, 1000, Millis(5000), /*mac=*/true));
    FAIL() << "connected with a different MAC choice";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kMismatch);
    EXPECT_NE(std::string(e.what()).find("HPCT_PS_FRAME_MAC"), std::string::npos) << e.what();
  }
}

TEST(PsSync, ShapeMismatchIsNamedOnEveryWorker) {
  ServerSet set(2, 2, Mode::kSync, 0);
  auto errors = run_workers(2, [&](int rank) {
    Client client(set.client_options(rank, 2, 1 << 20));
    std::vector<TensorSpec> specs = {{"layer1.weight", DataType::kFloat32, 64},
                                     {"layer2.weight", DataType::kFloat32, rank == 0 ? 100u : 120u}};
    client.register_tensors(specs, {});
  });
  for (int r = 0; r < 2; ++r) {
    const std::string& e = errors[static_cast<size_t>(r)];
    EXPECT_NE(e.find("shape mismatch"), std::string::npos) << e;
    EXPECT_NE(e.find("layer2.weight"), std::string::npos) << e;
    EXPECT_NE(e.find("100"), std::string::npos) << e;
    EXPECT_NE(e.find("120"), std::string::npos) << e;
    EXPECT_NE(e.find("worker 0"), std::string::npos) << e;
    EXPECT_NE(e.find("worker 1"), std::string::npos) << e;
  }
}

// A server that dies mid-job: the workers fail at once, naming its rank
// and host, instead of waiting.
TEST(PsFaults, ServerDeathIsBoundedAndNamed) {
  const std::vector<TensorSpec> specs = {{"w", DataType::kFloat32, 4096}};
  ServerSet set(2, 2, Mode::kSync, 0);
  std::atomic<int> first_step_done{0};
  std::atomic<bool> killed{false};
  std::thread killer([&] {
    while (first_step_done.load() < 2) std::this_thread::sleep_for(Millis(5));
    set.server(1).stop();
    killed = true;
  });
  const auto start = SteadyClock::now();
  auto errors = run_workers(2, [&](int rank) {
    Client client(set.client_options(rank, 2, 4096));  // 4 pieces, 2 per server
    client.register_tensors(specs, {});
    Buffers b = fill(specs, rank, 0);
    client.exchange(b.in(), b.out());
    ++first_step_done;
    while (!killed) std::this_thread::sleep_for(Millis(5));
    for (int step = 1; step < 100; ++step) client.exchange(b.in(), b.out());
  });
  killer.join();
  const auto took = std::chrono::duration_cast<Millis>(SteadyClock::now() - start);
  EXPECT_LT(took.count(), 10000);  // far below the 20 s timeout: the close is seen at once
  // Each worker names server 1, or (when the other worker's failure reached
  // it first through server 0) that worker, which died without a bye.
  int named_server = 0;
  for (int r = 0; r < 2; ++r) {
    const std::string& e = errors[static_cast<size_t>(r)];
    if (e.find("parameter server 1 on host1") != std::string::npos) {
      ++named_server;
    } else {
      EXPECT_NE(e.find("without saying bye"), std::string::npos) << e;
    }
  }
  EXPECT_GE(named_server, 1);
}

// A step that cannot finish (one worker never pushes) ends in a Timeout
// naming the server it waited for, after the timeout and not much later.
TEST(PsFaults, AStuckStepTimesOutNamingTheServer) {
  const std::vector<TensorSpec> specs = {{"w", DataType::kInt32, 10}};
  ServerSet set(1, 2, Mode::kSync, 0);
  std::atomic<bool> done{false};
  const auto start = SteadyClock::now();
  auto errors = run_workers(2, [&](int rank) {
    Client client(set.client_options(rank, 2, 1000, Millis(800)));
    client.register_tensors(specs, {});
    if (rank == 1) {
      while (!done) std::this_thread::sleep_for(Millis(5));  // alive, never pushes
      return;
    }
    Buffers b = fill(specs, rank, 0);
    try {
      client.exchange(b.in(), b.out());
    } catch (...) {
      done = true;
      throw;
    }
    done = true;
  });
  const auto took = std::chrono::duration_cast<Millis>(SteadyClock::now() - start);
  EXPECT_NE(errors[0].find("parameter server 0 on host0"), std::string::npos) << errors[0];
  EXPECT_NE(errors[0].find("moved no byte"), std::string::npos) << errors[0];
  EXPECT_LT(took.count(), 5000);
}

// Workers with 5, 3 and 1 batches in an epoch all finish it: each step sums
// the workers still in the epoch, then everyone starts the next epoch
// together.
TEST(PsSync, UnevenBatchCountsFinish) {
  const std::vector<TensorSpec> specs = {{"w", DataType::kInt64, 300}};
  const int workers = 3;
  const int steps_of[workers] = {5, 3, 1};
  ServerSet set(2, workers, Mode::kSync, 0);
  std::mutex mu;
  std::vector<std::string> failures;
  auto errors = run_workers(workers, [&](int rank) {
    Client client(set.client_options(rank, workers, 800));
    client.register_tensors(specs, {});
    for (int epoch = 0; epoch < 2; ++epoch) {
      const int steps = epoch == 0 ? steps_of[rank] : 2;
      for (int step = 0; step < steps; ++step) {
        std::vector<int> in_step;
        for (int r = 0; r < workers; ++r) {
          if (epoch == 1 || steps_of[r] > step) in_step.push_back(r);
        }
        Buffers b = fill(specs, rank, step);
        const int count = client.exchange(b.in(), b.out());
        Buffers want = expected_sum(specs, in_step, step);
        std::lock_guard<std::mutex> lock(mu);
        if (count != static_cast<int>(in_step.size()) || b.data != want.data) {
          failures.push_back("rank " + std::to_string(rank) + " epoch " + std::to_string(epoch) +
                             " step " + std::to_string(step) + " count " + std::to_string(count));
        }
      }
      client.leave({});
    }
  });
  set.join();
  for (int r = 0; r < workers; ++r) EXPECT_EQ(errors[static_cast<size_t>(r)], "") << r;
  EXPECT_TRUE(failures.empty()) << failures.front();
}

TEST(PsFaults, AWorkerKilledInSyncModeIsNamedToTheOthers) {
  const std::vector<TensorSpec> specs = {{"w", DataType::kInt32, 100}};
  ServerSet set(1, 2, Mode::kSync, 0);
  auto errors = run_workers(2, [&](int rank) {
    Client client(set.client_options(rank, 2, 1000));
    client.register_tensors(specs, {});
    Buffers b = fill(specs, rank, 0);
    client.exchange(b.in(), b.out());
    if (rank == 1) {
      client.drop_connections();
      return;
    }
    client.exchange(b.in(), b.out());
  });
  EXPECT_EQ(errors[1], "");
  EXPECT_NE(errors[0].find("worker 1 on worker-host1"), std::string::npos) << errors[0];
  EXPECT_NE(errors[0].find("without saying bye"), std::string::npos) << errors[0];
}

// Async updates of W per step: the servers add update / W = 1 per push, so
// the final parameters count every push exactly.
TEST(PsAsync, UpdatesAreAppliedAndTheEpochEndsWithTheSameParameters) {
  const int workers = 3;
  const std::vector<TensorSpec> specs = {{"w", DataType::kFloat32, 2000}, {"b", DataType::kFloat64, 3}};
  ServerSet set(2, workers, Mode::kAsync, 1);
  std::vector<Buffers> final_params(workers);
  auto errors = run_workers(workers, [&](int rank) {
    Client client(set.client_options(rank, workers, 1000));
    Buffers params = fill(specs, 0, 0);  // the same start; rank 0's is used
    if (rank != 0) {
      for (auto& d : params.data) std::fill(d.begin(), d.end(), 0);
    }
    client.register_tensors(specs, params.out());
    EXPECT_EQ(params.data, fill(specs, 0, 0).data);  // every worker starts from rank 0's
    Buffers update;
    update.data.push_back(std::vector<char>(2000 * 4));
    update.data.push_back(std::vector<char>(3 * 8));
    std::vector<float> uf(2000, static_cast<float>(workers));
    std::vector<double> ud(3, static_cast<double>(workers));
    std::memcpy(update.data[0].data(), uf.data(), 2000 * 4);
    std::memcpy(update.data[1].data(), ud.data(), 3 * 8);
    for (int step = 0; step < 4 + rank; ++step) client.exchange(update.in(), params.out());
    client.leave(params.out());
    final_params[static_cast<size_t>(rank)] = params;
  });
  for (int r = 0; r < workers; ++r) EXPECT_EQ(errors[static_cast<size_t>(r)], "") << r;
  const int pushes = 4 + 5 + 6;
  Buffers want = fill(specs, 0, 0);
  auto* wf = reinterpret_cast<float*>(want.data[0].data());
  for (int i = 0; i < 2000; ++i) wf[i] += static_cast<float>(pushes);
  auto* wd = reinterpret_cast<double*>(want.data[1].data());
  for (int i = 0; i < 3; ++i) wd[i] += pushes;
  for (int r = 0; r < workers; ++r) {
    EXPECT_EQ(final_params[static_cast<size_t>(r)].data, want.data) << "rank " << r;
  }
}

// The staleness bound: worker 0 runs fast, worker 1 slowly. Whenever
// worker 0 completes step t, worker 1 must have started step t - S; and
// worker 0 takes about as long as the slow one (it blocked, it did not race).
TEST(PsAsync, AFastWorkerBlocksAtTheStalenessBound) {
  for (int staleness : {0, 2}) {
    SCOPED_TRACE("staleness " + std::to_string(staleness));
    const std::vector<TensorSpec> specs = {{"w", DataType::kFloat32, 5000}};
    ServerSet set(2, 2, Mode::kAsync, staleness);
    std::atomic<int> slow_started{0};
    std::atomic<int> violations{0};
    std::atomic<int> max_lead{0};
    const int steps = 12;
    auto errors = run_workers(2, [&](int rank) {
      Client client(set.client_options(rank, 2, 4000));
      std::vector<float> params(5000, 1.0f), update(5000, 0.5f);
      client.register_tensors(specs, {params.data()});
      for (int t = 1; t <= steps; ++t) {
        if (rank == 1) {
          std::this_thread::sleep_for(Millis(30));
          slow_started = t;
        }
        client.exchange({update.data()}, {params.data()});
        if (rank == 0) {
          const int lead = t - slow_started.load();
          max_lead = std::max(max_lead.load(), lead);
          if (lead > staleness) ++violations;
        }
      }
      client.leave({params.data()});
    });
    EXPECT_EQ(errors[0], "");
    EXPECT_EQ(errors[1], "");
    EXPECT_EQ(violations.load(), 0) << "worker 0 ran " << max_lead.load() << " steps ahead";
    EXPECT_EQ(max_lead.load(), staleness);  // it did run ahead as far as allowed
  }
}

// A killed worker in async mode: the others finish their epochs.
TEST(PsFaults, AWorkerKilledInAsyncModeLetsTheOthersFinish) {
  const std::vector<TensorSpec> specs = {{"w", DataType::kFloat32, 100}};
  ServerSet set(2, 3, Mode::kAsync, 1);
  auto errors = run_workers(3, [&](int rank) {
    Client client(set.client_options(rank, 3, 200));
    std::vector<float> params(100, 0.0f), update(100, 3.0f);
    client.register_tensors(specs, {params.data()});
    for (int t = 0; t < 10; ++t) {
      if (rank == 2 && t == 3) {
        client.drop_connections();
        return;
      }
      client.exchange({update.data()}, {params.data()});
    }
    client.leave({params.data()});
    if (rank == 0) {
      EXPECT_EQ(params[0], 10.0f + 10.0f + 3.0f);
    }
  });
  set.join();
  for (int r = 0; r < 3; ++r) EXPECT_EQ(errors[static_cast<size_t>(r)], "") << r;
  EXPECT_EQ(set.error(0), "");
}

}  // namespace
}  // namespace hpct::ps
