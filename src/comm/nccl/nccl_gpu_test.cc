// GPU tests of comm's CUDA paths: NcclCommunicator on one rank and on one
// thread per GPU (2+ GPUs), its enqueue path with events, its refusal of two
// ranks on one GPU, its timeout; and StagedCommunicator on CUDA memory with
// two ranks (threads) sharing GPU 0. Every case skips with "no GPU" where
// cudaGetDeviceCount finds none (or fails); scripts/device-check.sh runs
// them on a lent GPU machine.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <functional>
#include <thread>
#include <vector>

#include "comm/cuda/cuda_memory.h"
#include "comm/cuda/cuda_probe.h"
#include "comm/cuda/staged_communicator.h"
#include "comm/nccl/communicator.h"
#include "comm/testing/thread_world.h"
#include "core/error.h"
#include "store/memory_store.h"

namespace hpct::comm {
namespace {

using namespace std::chrono_literals;

#define SKIP_UNLESS_GPUS(n)                                                            \
  do {                                                                                 \
    std::string why_;                                                                  \
    const int have_ = cuda_device_count(&why_);                                        \
    if (have_ == 0) GTEST_SKIP() << "no GPU: " << why_;                                \
    if (have_ < (n)) GTEST_SKIP() << "needs " << (n) << " GPUs, " << have_ << " here"; \
  } while (0)

void cuda_ok(cudaError_t rc) { ASSERT_EQ(rc, cudaSuccess) << cudaGetErrorString(rc); }

// Device memory holding floats, copied in and out synchronously.
class DeviceFloats {
 public:
  DeviceFloats(int device, size_t n) : n_(n) {
    cudaSetDevice(device);
    cudaMalloc(&p_, std::max<size_t>(n, 1) * sizeof(float));
  }
  explicit DeviceFloats(int device, const std::vector<float>& v) : DeviceFloats(device, v.size()) {
    cudaMemcpy(p_, v.data(), v.size() * sizeof(float), cudaMemcpyHostToDevice);
  }
  ~DeviceFloats() { cudaFree(p_); }
  DeviceFloats(const DeviceFloats&) = delete;
  DeviceFloats& operator=(const DeviceFloats&) = delete;
  float* get() { return static_cast<float*>(p_); }
  std::vector<float> read() const {
    std::vector<float> v(n_);
    cudaMemcpy(v.data(), p_, n_ * sizeof(float), cudaMemcpyDeviceToHost);
    return v;
  }

 private:
  void* p_ = nullptr;
  size_t n_;
};

NcclOptions options_for(int rank, int size, std::shared_ptr<store::Store> store, int device) {
  NcclOptions o;
  o.rank = rank;
  o.size = size;
  o.store = std::move(store);
  o.device = device;
  o.timeout = 60s;
  o.logger = Logger(LogLevel::kWarn, "all", rank, [](const std::string&) {});
  return o;
}

// Runs fn on `size` threads, rank r on GPU `device_of(r)`; rethrows the
// lowest rank's exception.
void run_nccl_world(int size, const std::function<int(int)>& device_of,
                    const std::function<void(NcclCommunicator&)>& fn) {
  auto store = testing::test_store();
  std::vector<std::exception_ptr> errors(size);
  std::vector<std::thread> threads;
  for (int r = 0; r < size; ++r) {
    threads.emplace_back([&, r] {
      try {
        auto comm = NcclCommunicator::connect(options_for(r, size, store, device_of(r)));
        fn(*comm);
      } catch (...) {
        errors[r] = std::current_exception();
      }
    });
  }
  for (auto& t : threads) t.join();
  for (auto& e : errors) {
    if (e) std::rethrow_exception(e);
  }
}

// Every collective on `comm`, checked; values are small integers (exact).
void check_collectives(Communicator& comm, int device) {
  const int r = comm.rank(), n = comm.size();
  const size_t count = 1000;
  // allreduce, out of place and in place.
  std::vector<float> mine(count);
  for (size_t i = 0; i < count; ++i) mine[i] = static_cast<float>(r + 1 + i % 7);
  DeviceFloats in(device, mine), out(device, count);
  AllreduceOptions a;
  a.input = in.get();
  a.output = out.get();
  a.count = count;
  allreduce(comm, a);
  auto got = out.read();
  for (size_t i = 0; i < count; ++i) {
    ASSERT_EQ(got[i], static_cast<float>(n * (n + 1) / 2 + n * (i % 7))) << "allreduce " << i;
  }
  a.input = nullptr;
  a.output = in.get();
  a.op = ReduceOp::kMax;
  allreduce(comm, a);
  EXPECT_EQ(in.read()[0], static_cast<float>(n));
  // allgather.
  DeviceFloats g_in(device, std::vector<float>(3, static_cast<float>(r))), g_out(device, 3 * n);
  AllgatherOptions g;
  g.input = g_in.get();
  g.output = g_out.get();
  g.count = 3;
  allgather(comm, g);
  got = g_out.read();
  for (int p = 0; p < n; ++p) EXPECT_EQ(got[3 * p + 2], static_cast<float>(p)) << "allgather";
  // allgatherv: rank p gives p + 1 values.
  DeviceFloats v_in(device, std::vector<float>(r + 1, static_cast<float>(10 + r)));
  std::vector<size_t> counts;
  size_t total = 0;
  for (int p = 0; p < n; ++p) {
    counts.push_back(p + 1);
    total += p + 1;
  }
  DeviceFloats v_out(device, total);
  AllgathervOptions v;
  v.input = v_in.get();
  v.output = v_out.get();
  v.counts = counts;
  allgatherv(comm, v);
  got = v_out.read();
  EXPECT_EQ(got[0], 10.0f);
  EXPECT_EQ(got[total - 1], static_cast<float>(10 + n - 1));
  // broadcast from the last rank.
  DeviceFloats b(device, std::vector<float>(5, static_cast<float>(r)));
  BroadcastOptions bo;
  bo.buffer = b.get();
  bo.count = 5;
  bo.root = n - 1;
  broadcast(comm, bo);
  EXPECT_EQ(b.read()[4], static_cast<float>(n - 1));
  // reduce-scatter: blocks of 2, block p of rank q holds p + q.
  std::vector<float> rs(2 * n);
  for (int p = 0; p < n; ++p) rs[2 * p] = rs[2 * p + 1] = static_cast<float>(p + r);
  DeviceFloats rs_in(device, rs), rs_out(device, 2);
  ReduceScatterOptions s;
  s.input = rs_in.get();
  s.output = rs_out.get();
  s.count = 2;
  reduce_scatter(comm, s);
  EXPECT_EQ(rs_out.read()[1], static_cast<float>(n * r + n * (n - 1) / 2));
  // alltoall: block p of rank q holds 100 q + p.
  std::vector<float> aa(2 * n);
  for (int p = 0; p < n; ++p) aa[2 * p] = aa[2 * p + 1] = static_cast<float>(100 * r + p);
  DeviceFloats aa_in(device, aa), aa_out(device, 2 * n);
  AlltoallOptions t;
  t.input = aa_in.get();
  t.output = aa_out.get();
  t.count = 2;
  alltoall(comm, t);
  got = aa_out.read();
  for (int p = 0; p < n; ++p) EXPECT_EQ(got[2 * p + 1], static_cast<float>(100 * p + r));
  barrier(comm);
}

TEST(NcclGpuTest, OneRankRunsEveryOperation) {
  SKIP_UNLESS_GPUS(1);
  auto comm = NcclCommunicator::connect(options_for(0, 1, nullptr, 0));
  EXPECT_STREQ(comm->backend_name(), "nccl");
  EXPECT_EQ(comm->algorithm(OpKind::kAllreduce, 1), "nccl");
  EXPECT_FALSE(comm->nccl_version().empty());
  check_collectives(*comm, 0);
}

TEST(NcclGpuTest, OneThreadPerGpuRunsEveryOperation) {
  SKIP_UNLESS_GPUS(2);
  const int n = std::min(cuda_device_count(nullptr), 4);
  run_nccl_world(
      n, [](int r) { return r; },
      [](NcclCommunicator& comm) { check_collectives(comm, comm.device()); });
}

TEST(NcclGpuTest, EnqueueWaitsOnReadyAndSignalsDoneWithoutHostSync) {
  SKIP_UNLESS_GPUS(1);
  auto comm = NcclCommunicator::connect(options_for(0, 1, nullptr, 0));
  cudaStream_t user = nullptr;
  cuda_ok(cudaStreamCreateWithFlags(&user, cudaStreamNonBlocking));
  cudaEvent_t ready = nullptr, done = nullptr;
  cuda_ok(cudaEventCreateWithFlags(&ready, cudaEventDisableTiming));
  cuda_ok(cudaEventCreateWithFlags(&done, cudaEventDisableTiming));
  const size_t count = 1 << 20;
  DeviceFloats in(0, count), out(0, count);
  // The producer: bytes of 0x3f make every float 0.746...; the collective
  // must see them, so it waits on `ready`.
  cuda_ok(cudaMemsetAsync(in.get(), 0x3f, count * sizeof(float), user));
  cuda_ok(cudaEventRecord(ready, user));
  AllreduceOptions a;
  a.input = in.get();
  a.output = out.get();
  a.count = count;
  const NcclWork w = comm->enqueue(a, ready, done);
  // The consumer waits on the device, not the host.
  cuda_ok(cudaStreamWaitEvent(user, done, 0));
  std::vector<float> host(count);
  cuda_ok(
      cudaMemcpyAsync(host.data(), out.get(), count * sizeof(float), cudaMemcpyDeviceToHost, user));
  cuda_ok(cudaStreamSynchronize(user));
  EXPECT_TRUE(comm->poll(w));
  comm->wait(w, 1s);
  float expect = 0;
  std::memset(&expect, 0x3f, sizeof expect);
  EXPECT_EQ(host[0], expect);
  EXPECT_EQ(host[count - 1], expect);
  cudaEventDestroy(ready);
  cudaEventDestroy(done);
  cudaStreamDestroy(user);
}

TEST(NcclGpuTest, TwoRanksOnOneGpuAreRefusedNamingTheWayOut) {
  SKIP_UNLESS_GPUS(1);
  try {
    run_nccl_world(
        2, [](int) { return 0; }, [](NcclCommunicator&) {});
    ADD_FAILURE() << "two ranks on one GPU were accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("ranks 0 and 1 share GPU"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("staged"), std::string::npos) << e.what();
  }
}

TEST(NcclGpuTest, SilentPeerTimesOutAbortsAndBreaksTheCommunicator) {
  SKIP_UNLESS_GPUS(2);
  std::atomic<bool> failed{false};
  run_nccl_world(
      2, [](int r) { return r; },
      [&](NcclCommunicator& comm) {
        if (comm.rank() == 1) {
          // Connected, never joins the allreduce; stays until rank 0 gave up.
          for (int i = 0; i < 300 && !failed; ++i) std::this_thread::sleep_for(100ms);
          return;
        }
        DeviceFloats x(0, 1024);
        AllreduceOptions a;
        a.output = x.get();
        a.count = 1024;
        a.timeout = 2000ms;
        const auto start = SteadyClock::now();
        try {
          allreduce(comm, a);
          ADD_FAILURE() << "no timeout";
        } catch (const Error& e) {
          EXPECT_EQ(e.code(), ErrorCode::kTimeout) << e.what();
          EXPECT_NE(std::string(e.what()).find("nccl allreduce of 4096 bytes"), std::string::npos)
              << e.what();
          EXPECT_NE(std::string(e.what()).find("aborted"), std::string::npos) << e.what();
        }
        EXPECT_LT(SteadyClock::now() - start, 10s);
        failed = true;
        EXPECT_THROW(allreduce(comm, a), Error);  // broken: at once
      });
}

TEST(StagedGpuTest, TwoRanksSharingGpuZeroRunEveryOperation) {
  SKIP_UNLESS_GPUS(1);
  testing::run_gloo_world(2, 60s, [](GlooCommunicator& gloo) {
    StagedCommunicator staged(gloo, std::make_unique<CudaDeviceMemory>(0));
    EXPECT_STREQ(staged.backend_name(), "staged-gloo");
    check_collectives(staged, 0);
    EXPECT_GE(staged.staging_allocations(), 1);
  });
}

}  // namespace
}  // namespace hpct::comm
