// CudaDevice and the engine's device path on a real GPU; every test skips
// with "no GPU" where none is visible (CI builds and links them).
#include "engine/cuda_device.h"

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <vector>

#include "comm/testing/thread_world.h"
#include "engine/engine.h"

namespace hpct::engine {
namespace {

#define HPCT_NEED_GPU() \
  if (CudaDevice::count() == 0) GTEST_SKIP() << "no GPU"

TEST(CudaDevice, CopiesOrderedByEvents) {
  HPCT_NEED_GPU();
  CudaDevice d(0);
  std::vector<float> host(1 << 20, 2.5f), back(1 << 20, 0.0f);
  float* dev = static_cast<float*>(d.allocate(host.size() * sizeof(float)));
  cudaStream_t producer = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&producer, cudaStreamNonBlocking), cudaSuccess);
  d.copy_async(dev, host.data(), host.size() * sizeof(float), Stream{producer});
  auto ready = d.record(Stream{producer});
  d.wait(d.comm_stream(), *ready);
  d.copy_async(back.data(), dev, back.size() * sizeof(float), d.comm_stream());
  ASSERT_TRUE(d.synchronize(d.comm_stream(), Millis(10000)));
  EXPECT_EQ(back, host);
  d.free(dev);
  cudaStreamDestroy(producer);
}

TEST(CudaDevice, CastsRoundTrip) {
  HPCT_NEED_GPU();
  CudaDevice d(0);
  const std::size_t n = 1000;
  std::vector<float> host(n);
  for (std::size_t i = 0; i < n; ++i) host[i] = static_cast<float>(i) * 0.25f;
  float* f = static_cast<float*>(d.allocate(n * sizeof(float)));
  auto* h = static_cast<std::uint16_t*>(d.allocate(n * 2));
  for (auto wire : {comm::DataType::kFloat16, comm::DataType::kBFloat16}) {
    std::vector<float> back(n, -1.0f);
    d.copy_async(f, host.data(), n * sizeof(float), d.comm_stream());
    d.cast_to_16_async(f, h, n, wire, d.comm_stream());
    d.cast_from_16_async(h, f, n, wire, 0.5f, d.comm_stream());
    d.copy_async(back.data(), f, n * sizeof(float), d.comm_stream());
    ASSERT_TRUE(d.synchronize(d.comm_stream(), Millis(10000)));
    for (std::size_t i = 0; i < n; ++i) ASSERT_NEAR(back[i], host[i] * 0.5f, 1e-2f * host[i] + 1e-3f) << i;
  }
  d.free(f);
  d.free(h);
}

// Two ranks as threads sharing GPU 0, each with its own CudaDevice, staged
// through the host communicator: the sums arrive on the device, and the
// consumer stream is ordered after the completion event.
TEST(CudaDevice, EngineAllreduceStaged) {
  HPCT_NEED_GPU();
  comm::testing::run_gloo_world(2, Millis(20000), [](comm::GlooCommunicator& c) {
    CudaDevice d(0);
    EngineOptions o;
    o.cycle_ms = 1;
    Engine e(c, o, Logger(LogLevel::kError, "all", c.rank(), [](const std::string&) {}));
    const std::size_t n = 4096;
    std::vector<float> host(n, static_cast<float>(c.rank() + 1)), back(n);
    float* dev = static_cast<float*>(d.allocate(n * sizeof(float)));
    cudaStream_t s = nullptr;
    ASSERT_EQ(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), cudaSuccess);
    d.copy_async(dev, host.data(), n * sizeof(float), Stream{s});
    TensorRef t(dev, comm::DataType::kFloat32, {static_cast<std::int64_t>(n)});
    t.device = &d;
    t.ready = d.record(Stream{s});
    t.stream = Stream{s};
    auto h = e.allreduce_async("g", t, comm::ReduceOp::kSum, Compression::kFp16);
    h.wait();  // orders s after the result
    d.copy_async(back.data(), dev, n * sizeof(float), Stream{s});
    ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
    for (float x : back) ASSERT_EQ(x, 3.0f);
    e.shutdown();
    d.free(dev);
    cudaStreamDestroy(s);
  });
}

}  // namespace
}  // namespace hpct::engine
