// The host-staged path's bookkeeping on the CPU: StagedCommunicator over
// in-process Gloo ranks, with "device" buffers in host memory
// (HostDeviceMemory) counted and poisoned by CountingMemory, so that buffer
// reuse and growth, offsets, in-place and out-of-place, the bytes each
// operation copies and the failure path are checked without a GPU. The same
// class on CUDA memory runs in nccl/nccl_gpu_test.cc.
#include "comm/cuda/staged_communicator.h"

#include <gtest/gtest.h>

#include <cstring>
#include <numeric>
#include <vector>

#include "comm/testing/collective_checks.h"
#include "comm/testing/thread_world.h"
#include "core/error.h"

namespace hpct::comm {
namespace {

using namespace std::chrono_literals;

// HostDeviceMemory that counts what the staged path asks of it, fills fresh
// staging buffers with 0xAB (a read of bytes the path never wrote shows up
// as a wrong result), and can be told to fail its next synchronize.
class CountingMemory final : public HostDeviceMemory {
 public:
  struct Counts {
    int allocs = 0, frees = 0, syncs = 0;
    size_t to_host = 0, to_device = 0, to_host_copies = 0, to_device_copies = 0;
  };
  explicit CountingMemory(Counts* counts) : c_(counts) {}

  void* alloc_pinned(size_t bytes) override {
    ++c_->allocs;
    void* p = HostDeviceMemory::alloc_pinned(bytes);
    std::memset(p, 0xAB, bytes);
    return p;
  }
  void free_pinned(void* p) noexcept override {
    if (p != nullptr) ++c_->frees;
    HostDeviceMemory::free_pinned(p);
  }
  void copy_to_host(void* host, const void* device, size_t bytes) override {
    c_->to_host += bytes;
    ++c_->to_host_copies;
    HostDeviceMemory::copy_to_host(host, device, bytes);
  }
  void copy_to_device(void* device, const void* host, size_t bytes) override {
    c_->to_device += bytes;
    ++c_->to_device_copies;
    HostDeviceMemory::copy_to_device(device, host, bytes);
  }
  void synchronize(Millis timeout, const std::string& what) override {
    ++c_->syncs;
    if (fail_next_sync) {
      throw Error(ErrorCode::kTimeout,
                  what + ": did not finish within " + std::to_string(timeout.count()) + " ms");
    }
  }
  bool fail_next_sync = false;

 private:
  Counts* c_;
};

// Runs fn on `size` ranks, each with a StagedCommunicator over its Gloo
// communicator and its own counts.
void run_staged_world(int size,
                      const std::function<void(StagedCommunicator&, CountingMemory::Counts&)>& fn) {
  testing::run_gloo_world(size, 30s, [&](GlooCommunicator& gloo) {
    CountingMemory::Counts counts;
    StagedCommunicator staged(gloo, std::make_unique<CountingMemory>(&counts));
    fn(staged, counts);
  });
}

class StagedWorldTest : public ::testing::TestWithParam<int> {};

TEST_P(StagedWorldTest, EveryOpEveryDtypePassesTheChecks) {
  testing::CheckOptions checks;
  checks.counts = {0, 1, 7, 5000};
  run_staged_world(GetParam(), [&](StagedCommunicator& comm, CountingMemory::Counts& c) {
    EXPECT_FALSE(comm.host_buffers());
    auto got = testing::check_everything(comm, checks);
    auto a2a = testing::check_alltoall(comm, checks);
    got.insert(got.end(), a2a.begin(), a2a.end());
    for (const auto& f : got) ADD_FAILURE() << "rank " << comm.rank() << ": " << f;
    // Hundreds of operations, a handful of allocations: the buffer is reused.
    EXPECT_LE(c.allocs, 20) << "staging buffer capacity " << comm.staging_capacity();
    EXPECT_EQ(c.allocs, comm.staging_allocations());
  });
}

INSTANTIATE_TEST_SUITE_P(WorldSizes, StagedWorldTest, ::testing::Values(1, 2, 3),
                         [](const ::testing::TestParamInfo<int>& i) {
                           return "ranks" + std::to_string(i.param);
                         });

TEST(StagedCommunicatorTest, StagingBufferIsReusedAndGrowsToAtLeastDouble) {
  run_staged_world(2, [](StagedCommunicator& comm, CountingMemory::Counts& c) {
    std::vector<float> x(500, 1.0f);
    AllreduceOptions a;
    a.output = x.data();
    a.count = 100;
    allreduce(comm, a);
    EXPECT_EQ(c.allocs, 1);
    EXPECT_EQ(comm.staging_capacity(), 400u);
    a.count = 50;  // smaller: reused
    allreduce(comm, a);
    EXPECT_EQ(c.allocs, 1);
    a.count = 101;  // a little larger: doubled, not 404
    allreduce(comm, a);
    EXPECT_EQ(c.allocs, 2);
    EXPECT_EQ(comm.staging_capacity(), 800u);
    EXPECT_EQ(c.frees, 1);  // the old one went back
    a.count = 500;          // more than double: exactly what is asked
    allreduce(comm, a);
    EXPECT_EQ(comm.staging_capacity(), 2000u);
    EXPECT_EQ(c.allocs, 3);
    // Sums over 2 ranks: the first 50 were in all four allreduces.
    EXPECT_EQ(x[0], 16.0f);
    EXPECT_EQ(x[60], 8.0f);
    EXPECT_EQ(x[100], 4.0f);
    EXPECT_EQ(x[499], 2.0f);
    // Count 0 copies nothing and allocates nothing.
    const size_t before = c.to_host;
    a.count = 0;
    allreduce(comm, a);
    EXPECT_EQ(c.to_host, before);
  });
}

TEST(StagedCommunicatorTest, OutOfPlaceAllreduceLeavesTheInputAndCopiesEachWayOnce) {
  run_staged_world(2, [](StagedCommunicator& comm, CountingMemory::Counts& c) {
    std::vector<std::int32_t> in(10), out(10, -1);
    std::iota(in.begin(), in.end(), comm.rank() * 100);
    AllreduceOptions a;
    a.input = in.data();
    a.output = out.data();
    a.count = 10;
    a.dtype = DataType::kInt32;
    allreduce(comm, a);
    for (int i = 0; i < 10; ++i) {
      EXPECT_EQ(out[i], 100 + 2 * i);
      EXPECT_EQ(in[i], comm.rank() * 100 + i);
    }
    EXPECT_EQ(c.to_host, 40u);
    EXPECT_EQ(c.to_device, 40u);
    EXPECT_EQ(c.syncs, 2);
  });
}

TEST(StagedCommunicatorTest, SegmentsArePackedAtTheirOffsetsAndUnpacked) {
  run_staged_world(3, [](StagedCommunicator& comm, CountingMemory::Counts& c) {
    std::vector<double> s0(3), s1(1), s2(5);
    const double r = comm.rank();
    for (size_t i = 0; i < s0.size(); ++i) s0[i] = r + i;
    for (size_t i = 0; i < s1.size(); ++i) s1[i] = 10 * r;
    for (size_t i = 0; i < s2.size(); ++i) s2[i] = r * i;
    AllreduceSegmentsOptions o;
    o.segments = {{s0.data(), 3}, {s1.data(), 1}, {nullptr, 0}, {s2.data(), 5}};
    o.dtype = DataType::kFloat64;
    ASSERT_TRUE(try_allreduce_segments(comm, o));
    for (size_t i = 0; i < s0.size(); ++i) EXPECT_EQ(s0[i], 3.0 + 3.0 * i);
    EXPECT_EQ(s1[0], 30.0);
    for (size_t i = 0; i < s2.size(); ++i) EXPECT_EQ(s2[i], 3.0 * i);
    EXPECT_EQ(comm.staging_capacity(), 9 * sizeof(double));  // one buffer for all
    EXPECT_EQ(c.to_host, 9 * sizeof(double));
    EXPECT_EQ(c.to_device_copies, 4u);
    EXPECT_EQ(c.syncs, 2);  // one wait each way, not one per segment
  });
}

TEST(StagedCommunicatorTest, AllgathervAndReduceScatterStageTheRightSizes) {
  run_staged_world(3, [](StagedCommunicator& comm, CountingMemory::Counts& c) {
    const int r = comm.rank();
    // allgatherv: rank r gives r + 1 floats.
    std::vector<float> mine(static_cast<size_t>(r) + 1, static_cast<float>(r));
    std::vector<float> all(6, -1);
    AllgathervOptions g;
    g.input = mine.data();
    g.output = all.data();
    g.counts = {1, 2, 3};
    allgatherv(comm, g);
    EXPECT_EQ(all, (std::vector<float>{0, 1, 1, 2, 2, 2}));
    EXPECT_EQ(c.to_host, mine.size() * 4);
    EXPECT_EQ(c.to_device, 24u);
    EXPECT_EQ(comm.staging_capacity(), staged_output_offset(mine.size() * 4) + 24);

    // reduce-scatter: 3 blocks of 2; rank r gets the sum of block r.
    c = {};
    std::vector<float> in(6), out(2, -1);
    for (int i = 0; i < 6; ++i) in[i] = static_cast<float>(i + r);
    ReduceScatterOptions s;
    s.input = in.data();
    s.output = out.data();
    s.count = 2;
    reduce_scatter(comm, s);
    EXPECT_EQ(out[0], static_cast<float>(3 * (2 * r) + 3));
    EXPECT_EQ(out[1], static_cast<float>(3 * (2 * r + 1) + 3));
    EXPECT_EQ(c.to_host, 24u);
    EXPECT_EQ(c.to_device, 8u);
  });
}

TEST(StagedCommunicatorTest, BroadcastCopiesOutOnRootAndInElsewhere) {
  run_staged_world(3, [](StagedCommunicator& comm, CountingMemory::Counts& c) {
    std::vector<std::uint8_t> b(33, static_cast<std::uint8_t>(comm.rank()));
    BroadcastOptions o;
    o.buffer = b.data();
    o.count = b.size();
    o.dtype = DataType::kUInt8;
    o.root = 1;
    broadcast(comm, o);
    EXPECT_EQ(b, std::vector<std::uint8_t>(33, 1));
    EXPECT_EQ(c.to_host, comm.rank() == 1 ? 33u : 0u);
    EXPECT_EQ(c.to_device, comm.rank() == 1 ? 0u : 33u);
  });
}

TEST(StagedCommunicatorTest, NamesItsBackendAndAlgorithm) {
  run_staged_world(2, [](StagedCommunicator& comm, CountingMemory::Counts&) {
    EXPECT_STREQ(comm.backend_name(), "staged-gloo");
    EXPECT_EQ(comm.algorithm(OpKind::kAllreduce, 1 << 20).rfind("staged:", 0), 0u);
  });
}

TEST(StagedCommunicatorTest, FailedCopyBreaksTheCommunicatorNamingTheOp) {
  testing::run_gloo_world(1, 10s, [](GlooCommunicator& gloo) {
    CountingMemory::Counts counts;
    auto memory = std::make_unique<CountingMemory>(&counts);
    CountingMemory* m = memory.get();
    StagedCommunicator comm(gloo, std::move(memory));
    std::vector<float> x(100);
    AllreduceOptions a;
    a.output = x.data();
    a.count = 100;
    m->fail_next_sync = true;
    try {
      allreduce(comm, a);
      ADD_FAILURE() << "the failed copy went unnoticed";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kTimeout);
      EXPECT_NE(std::string(e.what()).find("staged allreduce of 400 bytes"), std::string::npos)
          << e.what();
      EXPECT_NE(std::string(e.what()).find("copy to the host"), std::string::npos) << e.what();
    }
    m->fail_next_sync = false;
    try {
      allreduce(comm, a);
      ADD_FAILURE() << "a broken communicator ran an operation";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kTimeout);
      EXPECT_NE(std::string(e.what()).find("broken"), std::string::npos) << e.what();
    }
  });
}

}  // namespace
}  // namespace hpct::comm
