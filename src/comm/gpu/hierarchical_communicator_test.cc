// The hierarchical path's algorithm on the CPU: HierarchicalDeviceCommunicator
// with Gloo thread ranks standing in for NCCL inside each "host", Gloo across
// hosts, a StagedCommunicator over the world's Gloo ranks as the flat part,
// and HostDeviceMemory as the device. Threads play hosts through
// host_layout() over made-up host identities (grouped and interleaved rank
// orders), so which rank carries what across hosts, the offsets, the uneven
// tail, in-place and out-of-place, avg's single division, and the failure
// path are all checked bit for bit without a GPU.
#include "comm/gpu/hierarchical_communicator.h"

#include <gtest/gtest.h>

#include <cstring>
#include <exception>
#include <functional>
#include <numeric>
#include <thread>
#include <vector>

#include "comm/cuda/staged_communicator.h"
#include "comm/gpu/gpu_path.h"
#include "comm/testing/collective_checks.h"
#include "comm/testing/thread_world.h"
#include "core/error.h"

namespace hpct::comm {
namespace {

using namespace std::chrono_literals;

// Counts the bytes staged across hosts; can fail its next synchronize.
class CountingMemory final : public HostDeviceMemory {
 public:
  size_t to_host = 0, to_device = 0;
  bool fail_next_sync = false;
  void copy_to_host(void* host, const void* device, size_t bytes) override {
    to_host += bytes;
    HostDeviceMemory::copy_to_host(host, device, bytes);
  }
  void copy_to_device(void* device, const void* host, size_t bytes) override {
    to_device += bytes;
    HostDeviceMemory::copy_to_device(device, host, bytes);
  }
  void synchronize(Millis timeout, const std::string& what) override {
    if (fail_next_sync) {
      fail_next_sync = false;
      throw Error(ErrorCode::kTimeout,
                  what + ": did not finish within " + std::to_string(timeout.count()) + " ms");
    }
  }
};

struct Layout {
  int hosts;
  int per_host;
  bool interleaved;  // rank r on host r % hosts instead of r / per_host
};

std::int64_t host_of(const Layout& l, int rank) {
  return 1000 + (l.interleaved ? rank % l.hosts : rank / l.per_host);
}

struct RankParts {
  HierarchicalDeviceCommunicator* comm;
  CountingMemory* memory;  // the across-host copies
  HostLayout layout;
};

// Runs fn on every rank of `layout`, each with a hierarchical communicator
// built from three Gloo worlds (all ranks; this host's; local rank l of each
// host). flat_up_to_bytes 0: every allreduce takes the hierarchy.
void run_hier_world(const Layout& layout, const std::function<void(RankParts&)>& fn,
                    size_t flat_up_to_bytes = 0) {
  const int size = layout.hosts * layout.per_host;
  auto base = testing::test_store();
  std::vector<std::int64_t> hosts(static_cast<size_t>(size));
  for (int r = 0; r < size; ++r) hosts[static_cast<size_t>(r)] = host_of(layout, r);
  std::vector<std::exception_ptr> errors(static_cast<size_t>(size));
  std::vector<std::thread> threads;
  for (int r = 0; r < size; ++r) {
    threads.emplace_back([&, r] {
      try {
        const HostLayout hl = host_layout(hosts, r);
        auto world = GlooCommunicator::connect(testing::gloo_options_for(
            r, size, std::make_shared<store::PrefixStore>("world", base), 30s));
        HierarchicalParts p;
        p.local = GlooCommunicator::connect(testing::gloo_options_for(
            hl.local_rank, layout.per_host,
            std::make_shared<store::PrefixStore>("host" + std::to_string(hl.host_index), base),
            30s));
        p.across = GlooCommunicator::connect(testing::gloo_options_for(
            hl.host_index, layout.hosts,
            std::make_shared<store::PrefixStore>("across" + std::to_string(hl.local_rank), base),
            30s));
        p.flat = std::make_unique<StagedCommunicator>(*world, std::make_unique<HostDeviceMemory>());
        auto memory = std::make_unique<CountingMemory>();
        CountingMemory* counting = memory.get();
        p.memory = std::move(memory);
        p.flat_up_to_bytes = flat_up_to_bytes;
        p.local_world_ranks = hl.local_world_ranks;
        HierarchicalDeviceCommunicator comm(std::move(p));
        RankParts parts{&comm, counting, hl};
        fn(parts);
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

class HierarchicalWorldTest : public ::testing::TestWithParam<Layout> {};

// Every dtype and op, counts that split evenly, unevenly and not at all
// (fewer elements than ranks on a host), bit for bit; the flat operations too.
TEST_P(HierarchicalWorldTest, EveryOpEveryDtypePassesTheChecks) {
  testing::CheckOptions checks;
  checks.counts = {0, 1, 2, 5, 7, 64, 1001};
  run_hier_world(GetParam(), [&](RankParts& p) {
    EXPECT_FALSE(p.comm->host_buffers());
    auto got = testing::check_everything(*p.comm, checks);
    auto a2a = testing::check_alltoall(*p.comm, checks);
    got.insert(got.end(), a2a.begin(), a2a.end());
    for (const auto& f : got) ADD_FAILURE() << "rank " << p.comm->rank() << ": " << f;
  });
}

// Local rank l carries exactly its slice across hosts (1/L of the buffer),
// the last one its slice and the tail; both ways, once.
TEST_P(HierarchicalWorldTest, EachLocalRankCarriesItsSliceAcrossHosts) {
  const Layout layout = GetParam();
  run_hier_world(layout, [&](RankParts& p) {
    const size_t count = 1003;  // not a multiple of 2 or 3
    std::vector<float> x(count);
    std::iota(x.begin(), x.end(), static_cast<float>(p.comm->rank()));
    AllreduceOptions a;
    a.output = x.data();
    a.count = count;
    allreduce(*p.comm, a);
    const size_t per = static_cast<size_t>(layout.per_host);
    const size_t block = count / per;
    const bool last = p.layout.local_rank + 1 == layout.per_host;
    const size_t mine = (block + (last ? count - block * per : 0)) * sizeof(float);
    EXPECT_EQ(p.memory->to_host, mine) << "local rank " << p.layout.local_rank;
    EXPECT_EQ(p.memory->to_device, mine);
    const int size = p.comm->size();
    const float base = static_cast<float>(size * (size - 1) / 2);
    for (size_t i = 0; i < count; ++i) {
      ASSERT_EQ(x[i], base + static_cast<float>(i) * static_cast<float>(size)) << "element " << i;
    }
  });
}

// Out of place: the input stays, the output is whole; avg divides once
// (integers truncate once, as the flat backends do).
TEST_P(HierarchicalWorldTest, OutOfPlaceAvgOfIntegersDividesOnce) {
  run_hier_world(GetParam(), [&](RankParts& p) {
    const size_t count = 11;
    std::vector<std::int32_t> in(count), out(count, -7);
    for (size_t i = 0; i < count; ++i) in[i] = static_cast<std::int32_t>(i) + p.comm->rank() * 3;
    const std::vector<std::int32_t> kept = in;
    AllreduceOptions a;
    a.input = in.data();
    a.output = out.data();
    a.count = count;
    a.dtype = DataType::kInt32;
    a.op = ReduceOp::kAvg;
    allreduce(*p.comm, a);
    EXPECT_EQ(in, kept);
    const int n = p.comm->size();
    for (size_t i = 0; i < count; ++i) {
      const std::int32_t sum = static_cast<std::int32_t>(i) * n + 3 * n * (n - 1) / 2;
      EXPECT_EQ(out[i], sum / n) << "element " << i;
    }
  });
}

INSTANTIATE_TEST_SUITE_P(Layouts, HierarchicalWorldTest,
                         ::testing::Values(Layout{2, 2, false}, Layout{2, 3, true},
                                           Layout{3, 2, false}, Layout{3, 2, true},
                                           Layout{1, 3, false}, Layout{3, 1, false}),
                         [](const ::testing::TestParamInfo<Layout>& i) {
                           return std::to_string(i.param.hosts) + "hosts_x" +
                                  std::to_string(i.param.per_host) +
                                  (i.param.interleaved ? "_interleaved" : "");
                         });

TEST(HierarchicalDeviceCommunicatorTest, SmallMessagesAndInt16GoFlat) {
  run_hier_world(
      Layout{2, 2, false},
      [](RankParts& p) {
        EXPECT_EQ(p.comm->algorithm(OpKind::kAllreduce, 1024), "staged:direct:recursive-doubling");
        EXPECT_EQ(p.comm->algorithm(OpKind::kAllreduce, 4096), "hier:gloo+gloo+gloo");
        EXPECT_EQ(std::string(p.comm->backend_name()), "hierarchical-gloo-gloo");
        std::vector<float> small(256, 1.0f);  // 1 KiB: flat
        AllreduceOptions a;
        a.output = small.data();
        a.count = small.size();
        allreduce(*p.comm, a);
        EXPECT_EQ(p.memory->to_host, 0u);
        EXPECT_EQ(small[255], 4.0f);
        std::vector<std::int16_t> shorts(4096, 1);  // 8 KiB of int16: flat (NCCL has no int16)
        a.output = shorts.data();
        a.count = shorts.size();
        a.dtype = DataType::kInt16;
        allreduce(*p.comm, a);
        EXPECT_EQ(p.memory->to_host, 0u);
        EXPECT_EQ(shorts[4095], 4);
        std::vector<float> large(1024, 1.0f);  // 4 KiB: hierarchical
        a.output = large.data();
        a.count = large.size();
        a.dtype = DataType::kFloat32;
        allreduce(*p.comm, a);
        EXPECT_EQ(p.memory->to_host, 512 * sizeof(float));
        EXPECT_EQ(large[0], 4.0f);
        EXPECT_EQ(p.comm->staging_allocations(), 1);
      },
      2048);
}

TEST(HierarchicalDeviceCommunicatorTest, AFailedCopyIsNamedAndBreaksTheCommunicator) {
  run_hier_world(Layout{1, 1, false}, [](RankParts& p) {
    std::vector<float> x(100, 1.0f);
    AllreduceOptions a;
    a.output = x.data();
    a.count = x.size();
    p.memory->fail_next_sync = true;
    try {
      allreduce(*p.comm, a);
      FAIL() << "no error";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kTimeout);
      const std::string m = e.what();
      EXPECT_NE(m.find("hierarchical allreduce of 400 bytes on rank 0 of 1"), std::string::npos)
          << m;
      EXPECT_NE(m.find("across hosts (elements 0..99)"), std::string::npos) << m;
      EXPECT_NE(m.find("across hosts (elements 0..99): copy to the host: did not finish"),
                std::string::npos)
          << m;
    }
    try {
      barrier(*p.comm);  // a flat operation: broken too
      FAIL() << "no error after the failure";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kTimeout);
      EXPECT_NE(std::string(e.what()).find("broken by an earlier failure"), std::string::npos)
          << e.what();
    }
  });
}

TEST(HierarchicalDeviceCommunicatorTest, PartsThatDoNotFitAreRefused) {
  testing::run_gloo_world(1, 10s, [](GlooCommunicator& world) {
    HierarchicalParts p;
    try {
      HierarchicalDeviceCommunicator c(std::move(p));
      FAIL() << "no error";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
      EXPECT_NE(std::string(e.what()).find("local, across, flat and memory"), std::string::npos);
    }
    (void)world;
  });
}

}  // namespace
}  // namespace hpct::comm
