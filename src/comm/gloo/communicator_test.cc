// In-process tests of the Gloo backend: each rank is a thread with its own
// GlooCommunicator over real loopback TCP, meeting through one MemoryStore
// (a PrefixStore per test case); the lowest failing rank's exception is
// rethrown in the test thread.
#include "comm/gloo/communicator.h"

#include <gtest/gtest.h>

#include <atomic>
#include <condition_variable>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

#include "comm/testing/collective_checks.h"
#include "comm/testing/thread_world.h"
#include "core/error.h"
#include "store/memory_store.h"

namespace hpct::comm {
namespace {

using namespace std::chrono_literals;

using testing::test_store;

GlooOptions options_for(int rank, int size, std::shared_ptr<store::Store> store, Millis timeout) {
  return testing::gloo_options_for(rank, size, std::move(store), timeout);
}

void run_world(int size, Millis timeout, const std::function<void(GlooCommunicator&)>& fn) {
  testing::run_gloo_world(size, timeout, fn);
}

// A one-shot gate: ranks that must outlive the others' failure wait on it.
class Gate {
 public:
  void open() {
    std::lock_guard<std::mutex> lock(mu_);
    open_ = true;
    cv_.notify_all();
  }
  void wait_open(Millis bound) {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait_for(lock, bound, [&] { return open_; });
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool open_ = false;
};

class GlooWorldTest : public ::testing::TestWithParam<int> {};

TEST_P(GlooWorldTest, EveryOpEveryDtypeEverySize) {
  const int size = GetParam();
  testing::CheckOptions checks;  // counts 0, 1, 7, 1M; every dtype and op
  std::mutex mu;
  std::vector<std::string> failures;
  run_world(size, 60s, [&](GlooCommunicator& comm) {
    auto got = testing::check_everything(comm, checks);
    std::lock_guard<std::mutex> lock(mu);
    for (auto& f : got) failures.push_back("rank " + std::to_string(comm.rank()) + ": " + f);
  });
  for (const auto& f : failures) ADD_FAILURE() << f;
}

// With GlooOptions::shm, ranks of one host allreduce through shared memory
// (the threads of this process are one host); every other operation stays
// Gloo's. The same checks, bit for bit.
TEST(GlooCommunicatorTest, SharedMemoryAllreduceOnOneHostPassesEveryCheck) {
  for (int size : {2, 3}) {
    testing::CheckOptions checks;
    std::mutex mu;
    std::vector<std::string> failures;
    testing::run_gloo_world(
        size, 60s,
        [&](GlooCommunicator& comm) {
          auto got = testing::check_everything(comm, checks);
          if (comm.algorithm(OpKind::kAllreduce, 1 << 20) != "shm:reduce-scatter+allgather") {
            got.push_back("allreduce algorithm is " + comm.algorithm(OpKind::kAllreduce, 1 << 20));
          }
          std::lock_guard<std::mutex> lock(mu);
          for (auto& f : got) {
            failures.push_back("size " + std::to_string(size) + " rank " +
                               std::to_string(comm.rank()) + ": " + f);
          }
        },
        /*shm=*/true);
    for (const auto& f : failures) ADD_FAILURE() << f;
  }
}

// Threads playing hosts (GlooOptions::host_identity): hosts x ranks per
// host. Sum and avg above 64 KiB go hierarchically; every check, bit for bit.
TEST(GlooCommunicatorTest, HierarchicalAllreducePassesEveryCheck) {
  for (auto [hosts, per_host] : {std::pair{2, 2}, std::pair{2, 3}, std::pair{3, 2}}) {
    const int size = hosts * per_host;
    auto store = testing::test_store();
    std::mutex mu;
    std::vector<std::string> failures;
    std::vector<std::thread> threads;
    for (int r = 0; r < size; ++r) {
      threads.emplace_back([&, r] {
        std::vector<std::string> got;
        try {
          GlooOptions o = testing::gloo_options_for(r, size, store, 60s);
          o.hierarchical = true;
          o.host_identity = 1000 + r / per_host;
          auto comm = GlooCommunicator::connect(o);
          got = testing::check_everything(*comm, testing::CheckOptions{});
          if (comm->algorithm(OpKind::kAllreduce, 1 << 20) != "hier:shm+direct+shm") {
            got.push_back("allreduce algorithm is " + comm->algorithm(OpKind::kAllreduce, 1 << 20));
          }
        } catch (const std::exception& e) {
          got.push_back(e.what());
        }
        std::lock_guard<std::mutex> lock(mu);
        for (auto& f : got) {
          failures.push_back(std::to_string(hosts) + "x" + std::to_string(per_host) + " rank " +
                             std::to_string(r) + ": " + f);
        }
      });
    }
    for (auto& t : threads) t.join();
    for (const auto& f : failures) ADD_FAILURE() << f;
  }
}

// Without direct connections (HPCT_DIRECT_ALLREDUCE_BYTES=0) a
// reduce-scatter with per-rank counts goes over Gloo's send and receive:
// the same results, summed in rank order.
TEST(GlooCommunicatorTest, ReduceScatterWithCountsOverGlooSendAndReceive) {
  const int size = 3;
  auto store = testing::test_store();
  std::mutex mu;
  std::vector<std::string> failures;
  std::vector<std::thread> threads;
  for (int r = 0; r < size; ++r) {
    threads.emplace_back([&, r] {
      std::vector<std::string> got;
      try {
        GlooOptions o = testing::gloo_options_for(r, size, store, 30s);
        o.direct_allreduce_bytes = 0;
        auto comm = GlooCommunicator::connect(o);
        testing::CheckOptions checks;
        checks.dtypes = {DataType::kFloat32, DataType::kBFloat16, DataType::kInt64};
        checks.ops = {ReduceOp::kSum, ReduceOp::kAvg, ReduceOp::kMax};
        got = testing::check_reduce_scatter(*comm, checks);
        auto ordered = testing::check_reduce_scatter_order(*comm);
        got.insert(got.end(), ordered.begin(), ordered.end());
      } catch (const std::exception& e) {
        got.push_back(e.what());
      }
      std::lock_guard<std::mutex> lock(mu);
      for (auto& f : got) failures.push_back("rank " + std::to_string(r) + ": " + f);
    });
  }
  for (auto& t : threads) t.join();
  for (const auto& f : failures) ADD_FAILURE() << f;
}

INSTANTIATE_TEST_SUITE_P(WorldSizes, GlooWorldTest, ::testing::Range(1, 9),
                         [](const ::testing::TestParamInfo<int>& info) {
                           return "size" + std::to_string(info.param);
                         });

void expect_code(ErrorCode code, const std::function<void()>& fn,
                 const std::string& contains = "") {
  try {
    fn();
    ADD_FAILURE() << "expected " << error_code_name(code) << ", nothing was raised";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), code) << e.what();
    if (!contains.empty()) {
      EXPECT_NE(std::string(e.what()).find(contains), std::string::npos) << e.what();
    }
  }
}

TEST(GlooCommunicatorTest, ReduceScatterCountsMustNameEveryRank) {
  run_world(2, 10s, [](GlooCommunicator& comm) {
    float in[4] = {}, out[4] = {};
    ReduceScatterOptions o;
    o.input = in;
    o.output = out;
    o.counts = {4};
    expect_code(ErrorCode::kInvalidArgument, [&] { reduce_scatter(comm, o); }, "need one per rank (2)");
  });
}

TEST(GlooCommunicatorTest, ArgumentErrorsAreInvalidArgument) {
  run_world(2, 10s, [](GlooCommunicator& comm) {
    float x[4] = {};
    std::int32_t i[4] = {};
    BroadcastOptions b;
    b.buffer = x;
    b.count = 4;
    b.root = 2;
    expect_code(
        ErrorCode::kInvalidArgument, [&] { broadcast(comm, b); }, "root 2");
    AllreduceOptions a;
    a.output = nullptr;
    a.count = 4;
    expect_code(
        ErrorCode::kInvalidArgument, [&] { allreduce(comm, a); }, "null");
    // An integer average is no argument error: the sum, divided and
    // truncated toward zero (Horovod's), -5 / 2 = -2.
    a.output = i;
    a.dtype = DataType::kInt32;
    a.op = ReduceOp::kAvg;
    i[0] = comm.rank() == 0 ? -5 : 0;
    allreduce(comm, a);
    EXPECT_EQ(i[0], -2);
    SendOptions s;
    s.data = x;
    s.count = 1;
    s.peer = comm.rank();
    expect_code(ErrorCode::kInvalidArgument, [&] { send(comm, s); });
    // The communicator still works after argument errors: nothing was sent.
    a.dtype = DataType::kFloat32;
    a.op = ReduceOp::kSum;
    a.output = x;
    x[0] = 1;
    allreduce(comm, a);
    EXPECT_EQ(x[0], 2.0f);
  });
}

TEST(GlooCommunicatorTest, RankThatNeverJoinsMakesOthersTimeOut) {
  const Millis timeout = 1500ms;
  Gate done;
  std::atomic<int> finished{0};
  run_world(3, timeout, [&](GlooCommunicator& comm) {
    if (comm.rank() == 2) {
      // Alive and connected, but never calls the op; stays until the others
      // have failed so that its own shutdown cannot be taken for the cause.
      done.wait_open(30s);
      return;
    }
    float x[16] = {};
    AllreduceOptions a;
    a.output = x;
    a.count = 16;
    const auto start = SteadyClock::now();
    expect_code(
        ErrorCode::kTimeout, [&] { allreduce(comm, a); }, "peer rank 2");
    const auto elapsed = std::chrono::duration_cast<Millis>(SteadyClock::now() - start);
    EXPECT_GE(elapsed.count(), timeout.count() / 2) << "failed before anyone could know";
    EXPECT_LE(elapsed.count(), 2 * timeout.count());
    // Broken now: the next op fails at once with the same code.
    const auto again = SteadyClock::now();
    expect_code(
        ErrorCode::kTimeout, [&] { allreduce(comm, a); }, "broken");
    EXPECT_LT(SteadyClock::now() - again, 100ms);
    if (++finished == 2) done.open();
  });
}

TEST(GlooCommunicatorTest, RecvFromSilentPeerTimesOutNamingIt) {
  const Millis timeout = 1000ms;
  Gate done;
  run_world(2, timeout, [&](GlooCommunicator& comm) {
    if (comm.rank() == 0) {
      done.wait_open(30s);
      return;
    }
    std::uint8_t buf[8];
    RecvOptions r;
    r.data = buf;
    r.count = 8;
    r.peer = 0;
    expect_code(
        ErrorCode::kTimeout, [&] { recv(comm, r); }, "peer rank 0");
    done.open();
  });
}

TEST(GlooCommunicatorTest, ConnectTimesOutNamingMissingRank) {
  auto store = test_store();
  std::vector<std::thread> threads;
  std::vector<std::string> messages(2);
  std::vector<int> codes(2, -1);
  const auto start = SteadyClock::now();
  for (int r = 0; r < 2; ++r) {  // rank 2 of 3 never shows up
    threads.emplace_back([&, r] {
      try {
        GlooCommunicator::connect(options_for(r, 3, store, 1000ms));
      } catch (const Error& e) {
        codes[r] = static_cast<int>(e.code());
        messages[r] = e.what();
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_LT(SteadyClock::now() - start, 5s);
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(codes[r], static_cast<int>(ErrorCode::kTimeout)) << messages[r];
    EXPECT_NE(messages[r].find("rank(s) [2]"), std::string::npos) << messages[r];
    EXPECT_NE(messages[r].find("gloo/2"), std::string::npos) << messages[r];
  }
}

TEST(GlooCommunicatorTest, AlgorithmNames) {
  run_world(2, 10s, [](GlooCommunicator& comm) {
    // 2 ranks: every size over the direct connections.
    EXPECT_EQ(comm.algorithm(OpKind::kAllreduce, 1024), "direct:recursive-doubling");
    EXPECT_EQ(comm.algorithm(OpKind::kAllreduce, 64 << 20), "direct:recursive-doubling");
    EXPECT_EQ(comm.algorithm(OpKind::kReduceScatter, 1024), "ring");
    EXPECT_EQ(comm.algorithm(OpKind::kAllreduce, 0), "local");
    EXPECT_STREQ(comm.backend_name(), "gloo");
  });
  // More ranks: up to direct_allreduce_bytes (64 KiB), then Gloo's ring.
  run_world(3, 10s, [](GlooCommunicator& comm) {
    EXPECT_EQ(comm.algorithm(OpKind::kAllreduce, 64 << 10), "direct:recursive-doubling");
    EXPECT_EQ(comm.algorithm(OpKind::kAllreduce, (64 << 10) + 1), "ring");
  });
}

TEST(GlooCommunicatorTest, BadOptionsAreInvalidArgument) {
  expect_code(ErrorCode::kInvalidArgument, [] {
    GlooCommunicator::connect(options_for(3, 2, std::make_shared<store::MemoryStore>(), 1s));
  });
  expect_code(ErrorCode::kInvalidArgument,
              [] { GlooCommunicator::connect(options_for(0, 2, nullptr, 1s)); });
}

}  // namespace
}  // namespace hpct::comm
