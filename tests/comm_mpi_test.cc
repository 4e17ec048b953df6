// The MPI backend under mpirun: every rank of the job runs this binary.
//
// Default mode: a GoogleTest suite on one MpiCommunicator made by main (MPI
// can be started only once per process). Every rank runs every test; only
// rank 0 prints GoogleTest's report, the others print just their failed
// assertions, prefixed with their rank. Each rank exits non-zero when one of
// its tests failed, and mpirun then exits non-zero, so a failure on any rank
// fails the ctest entry.
//
// Fault modes (--fault=stop | --fault=kill, 2 ranks): rank 1 freezes
// (SIGSTOP) or dies (SIGKILL) in the middle of a stream of 4 MiB allreduces.
// For stop, rank 0 must raise Timeout naming the operation within its bound;
// it prints FAULT-TEST-PASSED (what ctest looks for), then SIGKILLs the
// frozen rank, whose PID it learned at start, so the job ends. For kill,
// mpirun itself must end the job and name the dead rank (ctest matches
// mpirun's message and bounds the time).
//
// --mpi-init=serialized|funneled: the program starts MPI itself (see
// run_started_by_program); the verdict is every rank's exit code.
#include <gtest/gtest.h>
#include <mpi.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <climits>
#include <cstdio>
#include <cstring>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "comm/mpi/communicator.h"
#include "comm/testing/collective_checks.h"
#include "core/env.h"
#include "core/error.h"
#include "core/world.h"

namespace hpct::comm {
namespace {

using Clock = std::chrono::steady_clock;

// The communicator main made; the tests share it (one MPI per process).
MpiCommunicator* the_comm = nullptr;
bool shm_expected = true;  // false with --no-shm

MpiCommunicator& comm() { return *the_comm; }

long long ms_since(Clock::time_point t) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - t).count();
}

// Runs f, which must throw an hpct::Error of code whose message contains text.
void expect_error(ErrorCode code, const std::string& text, const std::function<void()>& f) {
  try {
    f();
    ADD_FAILURE() << "expected a " << error_code_name(code) << " error containing '" << text
                  << "', got none";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), code) << e.what();
    EXPECT_NE(std::string(e.what()).find(text), std::string::npos)
        << "'" << text << "' not in: " << e.what();
  }
}

// Per-rank failure counts, so rank 0's report names the ranks that failed.
std::vector<std::int64_t> failures_per_rank(std::int64_t mine) {
  std::vector<std::int64_t> all(static_cast<size_t>(comm().size()));
  AllgatherOptions a;
  a.input = &mine;
  a.output = all.data();
  a.count = 1;
  a.dtype = DataType::kInt64;
  allgather(comm(), a);
  return all;
}

// Rank 0's report names every rank on which a test failed (the other ranks
// print only their own [rank N] lines). Every rank must reach TearDown: it is
// a collective.
class MpiCommunicatorTest : public ::testing::Test {
 protected:
  void TearDown() override {
    const auto failed = failures_per_rank(HasFailure() ? 1 : 0);
    if (comm().rank() != 0) return;
    for (size_t q = 1; q < failed.size(); ++q) {
      if (failed[q] != 0)
        ADD_FAILURE() << "failed on rank " << q << " (see its [rank " << q << "] lines)";
    }
  }
};

TEST_F(MpiCommunicatorTest, AgreesWithTheLauncherOnRankAndSize) {
  const WorldInfo world = discover_world(ProcessEnv());
  EXPECT_EQ(comm().rank(), world.rank);
  EXPECT_EQ(comm().size(), world.size);
  EXPECT_GE(comm().size(), 2);
  EXPECT_STREQ(comm().backend_name(), "mpi");
  // Every rank of these tests is on this host: allreduces of every size go
  // through shared memory unless the run turned it off (--no-shm).
  EXPECT_EQ(comm().uses_shm(1 << 20), shm_expected);
  EXPECT_EQ(comm().uses_shm(4), shm_expected);
  EXPECT_EQ(comm().algorithm(OpKind::kAllreduce, 1 << 20),
            shm_expected ? "shm:reduce-scatter+allgather" : "mpi:MPI_Allreduce");
  EXPECT_EQ(comm().algorithm(OpKind::kBroadcast, 1 << 20), "mpi:MPI_Bcast");
  EXPECT_EQ(comm().algorithm(OpKind::kReduceScatter, 0), "mpi:MPI_Reduce_scatter_block");
  EXPECT_FALSE(comm().library_version().empty());
  EXPECT_TRUE(comm().started_mpi());
}

TEST_F(MpiCommunicatorTest, EveryOperationDtypeOpAndSizeIsExact) {
  const auto t0 = Clock::now();
  const std::vector<std::string> failures =
      testing::check_everything(comm(), testing::CheckOptions{});
  for (const std::string& f : failures) ADD_FAILURE() << f;
  if (comm().rank() == 0) {
    std::printf("check_everything on %d ranks: %lld ms\n", comm().size(), ms_since(t0));
  }
}

TEST_F(MpiCommunicatorTest, CountsThatOverflowMpiIntAreRefused) {
  // The checks run before MPI sees the call, so these small buffers are never read.
  std::vector<float> small(4);
  const size_t too_many = static_cast<size_t>(INT_MAX) + 1;
  AllreduceOptions ar;
  ar.output = small.data();
  ar.count = too_many;
  expect_error(ErrorCode::kInvalidArgument, "does not fit MPI's int counts",
               [&] { allreduce(comm(), ar); });

  AllgathervOptions av;
  av.input = small.data();
  av.output = small.data();
  av.counts.assign(static_cast<size_t>(comm().size()), static_cast<size_t>(INT_MAX));
  expect_error(ErrorCode::kInvalidArgument, "total count", [&] { allgatherv(comm(), av); });
  av.counts.assign(static_cast<size_t>(comm().size()), 1);
  av.counts.back() = too_many;
  expect_error(ErrorCode::kInvalidArgument, "counts[" + std::to_string(comm().size() - 1) + "]",
               [&] { allgatherv(comm(), av); });

  ReduceScatterOptions rs;
  rs.input = small.data();
  rs.output = small.data();
  rs.count = static_cast<size_t>(INT_MAX) / static_cast<size_t>(comm().size()) + 1;
  expect_error(ErrorCode::kInvalidArgument, "count * size", [&] { reduce_scatter(comm(), rs); });

  SendOptions s;
  s.data = small.data();
  s.count = too_many;
  s.peer = (comm().rank() + 1) % comm().size();
  expect_error(ErrorCode::kInvalidArgument, "send on rank " + std::to_string(comm().rank()),
               [&] { send(comm(), s); });
  barrier(comm());  // still usable
}

TEST_F(MpiCommunicatorTest, ArgumentErrorsNameTheOperationAndLeaveItUsable) {
  std::vector<std::int32_t> buf(8);
  AllreduceOptions ar;
  ar.output = nullptr;
  ar.count = 1;
  expect_error(ErrorCode::kInvalidArgument, "allreduce on rank", [&] { allreduce(comm(), ar); });
  // An integer average is the sum divided and truncated toward zero (as
  // Horovod's): -5 over 2 ranks is -2, not -3.
  ar.output = buf.data();
  ar.dtype = DataType::kInt32;
  ar.op = ReduceOp::kAvg;
  buf[0] = comm().rank() == 0 ? -5 : 0;
  allreduce(comm(), ar);
  EXPECT_EQ(buf[0], -5 / comm().size());

  BroadcastOptions b;
  b.buffer = buf.data();
  b.count = 1;
  b.root = comm().size();
  expect_error(ErrorCode::kInvalidArgument, "root", [&] { broadcast(comm(), b); });

  SendOptions s;
  s.data = buf.data();
  s.count = 1;
  s.peer = (comm().rank() + 1) % comm().size();
  s.tag = 0xffffffffu;
  expect_error(ErrorCode::kInvalidArgument, "MPI_TAG_UB", [&] { send(comm(), s); });
  RecvOptions r;
  r.data = buf.data();
  r.count = 1;
  r.peer = s.peer;
  r.tag = 0xffffffffu;
  expect_error(ErrorCode::kInvalidArgument, "MPI_TAG_UB", [&] { recv(comm(), r); });
  s.peer = comm().rank();
  s.tag = 0;
  expect_error(ErrorCode::kInvalidArgument, "itself", [&] { send(comm(), s); });

  // Still usable: a real allreduce after the refused ones.
  std::fill(buf.begin(), buf.end(), 1);
  ar.op = ReduceOp::kSum;
  ar.count = buf.size();
  allreduce(comm(), ar);
  EXPECT_EQ(buf[7], comm().size());
}

TEST_F(MpiCommunicatorTest, ReceivingAnotherCountIsAMismatchAndNotFatal) {
  std::vector<std::uint8_t> five(5, 42), got(8, 0);
  if (comm().rank() == 0) {
    SendOptions s;
    s.data = five.data();
    s.count = five.size();
    s.peer = 1;
    s.tag = 11;
    send(comm(), s);
    s.tag = 12;
    send(comm(), s);
  } else if (comm().rank() == 1) {
    RecvOptions r;
    r.data = got.data();
    r.count = 4;  // shorter than what rank 0 sends
    r.peer = 0;
    r.tag = 11;
    expect_error(ErrorCode::kMismatch, "longer", [&] { recv(comm(), r); });
    r.count = 6;  // longer
    r.tag = 12;
    expect_error(ErrorCode::kMismatch, "received 5 from rank 0 tag 12, expected 6 uint8",
                 [&] { recv(comm(), r); });
    EXPECT_EQ(got[4], 42);
  }
  barrier(comm());  // neither side is broken
}

TEST_F(MpiCommunicatorTest, CountZeroSendRecvAndBroadcastWork) {
  BroadcastOptions b;
  b.count = 0;
  b.root = comm().size() - 1;
  broadcast(comm(), b);
  if (comm().rank() < 2) {
    SendOptions s;
    s.count = 0;
    s.peer = 1 - comm().rank();
    RecvOptions r;
    r.count = 0;
    r.peer = s.peer;
    if (comm().rank() == 0) {
      send(comm(), s);
      recv(comm(), r);
    } else {
      recv(comm(), r);
      send(comm(), s);
    }
  }
  barrier(comm());
}

// Last, and without the fixture's gather: it breaks rank 0's communicator. Rank 0 waits for a
// message that rank 1 sends only after rank 0's timeout; the late message then completes the
// abandoned MPI_Recv, so the worker is idle again and MPI_Finalize runs.
TEST(MpiCommunicator, ZzTimeoutNamesOpRankAndCallThenEveryOpFailsAtOnce) {
  static std::uint8_t late[16];  // the abandoned receive's buffer must outlive the test
  constexpr int kTimeoutMs = 300;
  if (comm().rank() == 0) {
    RecvOptions r;
    r.data = late;
    r.count = sizeof late;
    r.peer = 1;
    r.tag = 99;
    r.timeout = std::chrono::milliseconds(kTimeoutMs);
    const auto t0 = Clock::now();
    expect_error(ErrorCode::kTimeout, "recv on rank 0 of", [&] { recv(comm(), r); });
    const long long waited = ms_since(t0);
    EXPECT_GE(waited, kTimeoutMs);
    EXPECT_LT(waited, kTimeoutMs + 1000);
    expect_error(ErrorCode::kTimeout, "MPI_Recv of 16 uint8 from rank 1 tag 99",
                 [&] { barrier(comm()); });
    const auto t1 = Clock::now();
    expect_error(ErrorCode::kTimeout, "broken", [&] { barrier(comm()); });
    EXPECT_LT(ms_since(t1), 50) << "a broken communicator must fail at once";
    // Let the late message complete the abandoned MPI_Recv, so the worker is
    // idle and MPI_Finalize runs (mpirun's exit code shows it did). Reading
    // `late` here would race with the worker: nothing orders the two.
    std::this_thread::sleep_for(std::chrono::milliseconds(1500));
  } else if (comm().rank() == 1) {
    std::this_thread::sleep_for(std::chrono::milliseconds(kTimeoutMs + 500));
    std::vector<std::uint8_t> msg(16, 7);
    SendOptions s;
    s.data = msg.data();
    s.count = msg.size();
    s.peer = 0;
    s.tag = 99;
    send(comm(), s);
  }
}

// On ranks other than 0: only failed assertions, each prefixed with the rank.
class RankFailurePrinter : public ::testing::EmptyTestEventListener {
 public:
  explicit RankFailurePrinter(int rank) : rank_(rank) {}
  void OnTestPartResult(const ::testing::TestPartResult& r) override {
    if (!r.failed()) return;
    std::fprintf(stderr, "[rank %d] %s:%d: Failure\n%s\n", rank_,
                 r.file_name() ? r.file_name() : "?", r.line_number(), r.message());
  }

 private:
  int rank_;
};

// --fault=stop|kill on 2 ranks: see the file comment. Returns the exit code.
int run_fault(std::unique_ptr<MpiCommunicator>& comm_owner, const std::string& fault) {
  MpiCommunicator& c = *comm_owner;
  if (c.size() != 2) {
    std::fprintf(stderr, "--fault needs exactly 2 ranks, got %d\n", c.size());
    return 2;
  }
  const std::vector<std::int64_t> pids = allgather_value(c, ::getpid());
  if (c.rank() == 1) {
    // Freeze or die from another thread, so it strikes in the middle of an
    // allreduce rather than between two.
    const int sig = fault == "stop" ? SIGSTOP : SIGKILL;
    std::thread([sig] {
      std::this_thread::sleep_for(std::chrono::milliseconds(300));
      // Wall clock, so the end of the job can be timed from outside.
      const long long now_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                                   std::chrono::system_clock::now().time_since_epoch())
                                   .count();
      std::printf("rank 1: raising %s at %lld ms since the epoch\n", strsignal(sig), now_ms);
      std::fflush(stdout);
      ::raise(sig);
    }).detach();
  }
  // 4 MiB; static because a worker left stuck in MPI may still hold it.
  static std::vector<float> data(1u << 20, 1.0f);
  AllreduceOptions ar;
  ar.output = data.data();
  ar.count = data.size();
  const auto start = Clock::now();
  for (int i = 0; ms_since(start) < 30000; ++i) {
    const auto t0 = Clock::now();
    try {
      allreduce(c, ar);
    } catch (const Error& e) {
      const long long waited = ms_since(t0);
      const std::string what = e.what();
      std::printf("rank %d: allreduce %d raised %s after %lld ms: %s\n", c.rank(), i,
                  error_code_name(e.code()), waited, what.c_str());
      bool ok = e.code() == ErrorCode::kTimeout &&
                what.find("allreduce on rank 0 of 2") != std::string::npos &&
                what.find("allreduce of 1048576 float32") != std::string::npos &&
                waited >= c.default_timeout().count() &&
                waited < c.default_timeout().count() + 2000;
      const int rank = c.rank();
      // The worker is stuck in MPI_Allreduce: the destructor must not wait
      // for it (it detaches it and skips MPI_Finalize).
      const auto t1 = Clock::now();
      comm_owner.reset();
      const long long destroy_ms = ms_since(t1);
      std::printf("rank %d: destroyed the broken communicator in %lld ms\n", rank, destroy_ms);
      ok = ok && destroy_ms < 500;
      if (ok) std::printf("FAULT-TEST-PASSED %s\n", fault.c_str());
      std::fflush(stdout);
      std::this_thread::sleep_for(std::chrono::milliseconds(200));  // let mpirun forward the line
      if (rank == 0) {
        std::printf("rank 0: killing the frozen rank 1 (pid %lld)\n",
                    static_cast<long long>(pids[1]));
        std::fflush(stdout);
        ::kill(static_cast<pid_t>(pids[1]), SIGKILL);
      }
      return ok ? 0 : 1;
    }
  }
  std::printf("rank %d: no failure within 30 s\n", c.rank());
  return 1;
}

// --mpi-init=serialized|funneled: the program starts MPI itself, at that
// thread level, before making the communicator. SERIALIZED must work and be
// left running for the program to finalize; FUNNELED must be refused (our
// worker is not MPI's main thread). After MPI_Finalize, create() must refuse
// to start MPI again. Returns the exit code; every rank checks.
int run_started_by_program(const std::string& level) {
  const int wanted = level == "funneled" ? MPI_THREAD_FUNNELED : MPI_THREAD_SERIALIZED;
  int provided = MPI_THREAD_SINGLE;
  MPI_Init_thread(nullptr, nullptr, wanted, &provided);
  MpiOptions options;
  options.default_timeout = std::chrono::milliseconds(20000);
  bool ok = true;
  auto fail = [&](const std::string& why) {
    std::fprintf(stderr, "--mpi-init=%s: %s\n", level.c_str(), why.c_str());
    ok = false;
  };
  if (provided < MPI_THREAD_SERIALIZED) {
    try {
      MpiCommunicator::create(options);
      fail("create() accepted MPI started below MPI_THREAD_SERIALIZED");
    } catch (const Error& e) {
      if (e.code() != ErrorCode::kInvalidArgument ||
          std::string(e.what()).find("needs MPI_THREAD_SERIALIZED") == std::string::npos) {
        fail(std::string("wrong error: ") + e.what());
      }
    }
  } else {
    if (wanted != MPI_THREAD_SERIALIZED) fail("MPI gave more than FUNNELED; cannot test refusal");
    auto c = MpiCommunicator::create(options);
    if (c->started_mpi()) fail("started_mpi() is true although the program started MPI");
    std::int32_t one = 1;
    AllreduceOptions a;
    a.output = &one;
    a.count = 1;
    a.dtype = DataType::kInt32;
    allreduce(*c, a);
    if (one != c->size()) fail("allreduce gave " + std::to_string(one));
    c.reset();
    int finalized = 1;
    MPI_Finalized(&finalized);
    if (finalized) fail("the communicator finalized MPI that the program started");
  }
  MPI_Finalize();
  try {
    MpiCommunicator::create(options);
    fail("create() after MPI_Finalize succeeded");
  } catch (const Error& e) {
    if (e.code() != ErrorCode::kInvalidArgument ||
        std::string(e.what()).find("already finalized") == std::string::npos) {
      fail(std::string("wrong error after MPI_Finalize: ") + e.what());
    }
  }
  return ok ? 0 : 1;
}

}  // namespace
}  // namespace hpct::comm

int main(int argc, char** argv) {
  using namespace hpct::comm;
  ::testing::InitGoogleTest(&argc, argv);
  std::string fault;
  for (int i = 1; i < argc; ++i) {
    if (std::strncmp(argv[i], "--fault=", 8) == 0) fault = argv[i] + 8;
    if (std::strncmp(argv[i], "--mpi-init=", 11) == 0) return run_started_by_program(argv[i] + 11);
  }
  MpiOptions options;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--no-shm") == 0) options.shm = shm_expected = false;
  }
  // Bounds every test: a rank that diverges makes the others time out, not hang.
  options.default_timeout = std::chrono::milliseconds(20000);
  if (fault == "stop") options.default_timeout = std::chrono::milliseconds(3000);
  if (fault == "kill") options.default_timeout = std::chrono::milliseconds(30000);
  std::unique_ptr<MpiCommunicator> comm;
  try {
    comm = MpiCommunicator::create(options);
  } catch (const hpct::Error& e) {
    std::fprintf(stderr, "MpiCommunicator::create: %s\n", e.what());
    return 1;
  }
  if (!fault.empty()) return run_fault(comm, fault);

  the_comm = comm.get();
  if (comm->rank() != 0) {
    auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
    delete listeners.Release(listeners.default_result_printer());
    listeners.Append(new RankFailurePrinter(comm->rank()));
  }
  const int rc = RUN_ALL_TESTS();
  the_comm = nullptr;
  comm.reset();  // MPI_Finalize
  return rc;
}
