// GPU tests of connect_gpu_world: threads play ranks (and, through made-up
// host identities, hosts), each with a Gloo world as its host communicator;
// the chosen path's communicator then allreduces CUDA memory. Every case
// skips with "no GPU" where the CUDA probe finds none; the hierarchical and
// nccl cases need NCCL in the build, the 2x2 one four GPUs.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <exception>
#include <functional>
#include <thread>
#include <vector>

#include "comm/cuda/cuda_probe.h"
#include "comm/gpu/gpu_world.h"
#include "comm/gpu/hierarchical_communicator.h"
#include "comm/testing/thread_world.h"
#include "core/error.h"

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

struct Rank {
  std::int64_t host;
  int device;
};

// Runs connect_gpu_world on one thread per rank and then fn with its result.
void run_gpu_world(const std::vector<Rank>& ranks, const std::string& path,
                   const std::function<void(GpuWorld&, int device)>& fn) {
  const int size = static_cast<int>(ranks.size());
  auto base = testing::test_store();
  std::vector<std::exception_ptr> errors(ranks.size());
  std::vector<std::thread> threads;
  for (int r = 0; r < size; ++r) {
    threads.emplace_back([&, r] {
      try {
        const Rank me = ranks[static_cast<size_t>(r)];
        auto world = GlooCommunicator::connect(testing::gloo_options_for(
            r, size, std::make_shared<store::PrefixStore>("world", base), 60s));
        GpuWorldOptions o;
        o.host = world.get();
        o.store = base;
        o.device = me.device;
        o.path = path;
        o.timeout = 60s;
        o.flat_up_to_bytes = 0;
        o.host_identity = me.host;
        o.logger = Logger(LogLevel::kWarn, "all", r, [](const std::string&) {});
        o.connect_host_group = [](int rank, int n, std::shared_ptr<store::Store> s) {
          return std::unique_ptr<Communicator>(
              GlooCommunicator::connect(testing::gloo_options_for(rank, n, std::move(s), 60s)));
        };
        GpuWorld w = connect_gpu_world(o);
        fn(w, me.device);
      } catch (...) {
        errors[static_cast<size_t>(r)] = std::current_exception();
      }
    });
  }
  for (auto& t : threads) t.join();
  for (auto& e : errors) {
    if (e) std::rethrow_exception(e);
  }
}

// An in-place sum of 1001 floats (uneven on 2 and 3 ranks per host) on the device.
void check_allreduce(Communicator& comm, int device) {
  const size_t count = 1001;
  std::vector<float> host(count);
  for (size_t i = 0; i < count; ++i) host[i] = static_cast<float>(comm.rank() + 1 + i % 5);
  ASSERT_EQ(cudaSetDevice(device), cudaSuccess);
  void* d = nullptr;
  ASSERT_EQ(cudaMalloc(&d, count * sizeof(float)), cudaSuccess);
  cudaMemcpy(d, host.data(), count * sizeof(float), cudaMemcpyHostToDevice);
  AllreduceOptions a;
  a.output = d;
  a.count = count;
  allreduce(comm, a);
  cudaMemcpy(host.data(), d, count * sizeof(float), cudaMemcpyDeviceToHost);
  cudaFree(d);
  const int n = comm.size();
  for (size_t i = 0; i < count; ++i) {
    ASSERT_EQ(host[i], static_cast<float>(n * (n + 1) / 2 + n * (i % 5))) << "element " << i;
  }
}

TEST(GpuWorldGpuTest, TwoRanksOnOneGpuAreStaged) {
  SKIP_UNLESS_GPUS(1);
  run_gpu_world({{0, 0}, {0, 0}}, "auto", [](GpuWorld& w, int device) {
    EXPECT_EQ(w.choice.path, GpuPath::kStaged) << w.choice.reason;
    EXPECT_FALSE(w.comm->host_buffers());
    check_allreduce(*w.comm, device);
  });
}

TEST(GpuWorldGpuTest, NcclOnTwoRanksOnOneGpuIsRefusedNamingTheFix) {
  SKIP_UNLESS_GPUS(1);
  try {
    run_gpu_world({{0, 0}, {0, 0}}, "nccl", [](GpuWorld&, int) {});
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("use HPCT_GPU_PATH=staged or auto"), std::string::npos)
        << e.what();
  }
}

TEST(GpuWorldGpuTest, OneRankTakesNccl) {
  SKIP_UNLESS_GPUS(1);
  if (!gpu_world_has_nccl()) GTEST_SKIP() << "this build has no NCCL";
  run_gpu_world({{0, 0}}, "auto", [](GpuWorld& w, int device) {
    EXPECT_EQ(w.choice.path, GpuPath::kNccl) << w.choice.reason;
    EXPECT_STREQ(w.comm->backend_name(), "nccl");
    check_allreduce(*w.comm, device);
  });
}

// Two "hosts" with one rank each, both on GPU 0: NCCL of one rank inside
// each, Gloo across.
TEST(GpuWorldGpuTest, HierarchyOfTwoHostsOfOneRank) {
  SKIP_UNLESS_GPUS(1);
  if (!gpu_world_has_nccl()) GTEST_SKIP() << "this build has no NCCL";
  run_gpu_world({{11, 0}, {22, 0}}, "hierarchical", [](GpuWorld& w, int device) {
    EXPECT_EQ(w.choice.path, GpuPath::kHierarchical) << w.choice.reason;
    EXPECT_STREQ(w.comm->backend_name(), "hierarchical-nccl-gloo");
    check_allreduce(*w.comm, device);
  });
}

TEST(GpuWorldGpuTest, HierarchyOfTwoHostsOfTwoRanks) {
  SKIP_UNLESS_GPUS(4);
  if (!gpu_world_has_nccl()) GTEST_SKIP() << "this build has no NCCL";
  run_gpu_world({{11, 0}, {11, 1}, {22, 2}, {22, 3}}, "auto", [](GpuWorld& w, int device) {
    EXPECT_EQ(w.choice.path, GpuPath::kHierarchical) << w.choice.reason;
    check_allreduce(*w.comm, device);
  });
}

}  // namespace
}  // namespace hpct::comm
