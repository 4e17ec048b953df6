// The generic alltoall (Communicator::do_alltoall: the own block copied,
// then pairwise send/recv) on in-process Gloo ranks, world sizes 1..6 (4 and
// 6 have steps whose transfers form several cycles), every dtype, counts 0,
// 1, odd and large; and its argument checks.
#include <gtest/gtest.h>

#include <vector>

#include "comm/communicator.h"
#include "comm/testing/collective_checks.h"
#include "comm/testing/thread_world.h"
#include "core/error.h"

namespace hpct::comm {
namespace {

using namespace std::chrono_literals;

class AlltoallWorldTest : public ::testing::TestWithParam<int> {};

TEST_P(AlltoallWorldTest, EveryDtypeEverySize) {
  testing::CheckOptions checks;
  checks.counts = {0, 1, 7, 1u << 16};
  testing::run_gloo_world(GetParam(), 30s, [&](GlooCommunicator& comm) {
    const auto got = testing::check_alltoall(comm, checks);
    for (const auto& f : got) ADD_FAILURE() << "rank " << comm.rank() << ": " << f;
  });
}

INSTANTIATE_TEST_SUITE_P(WorldSizes, AlltoallWorldTest, ::testing::Range(1, 7),
                         [](const ::testing::TestParamInfo<int>& i) {
                           return "ranks" + std::to_string(i.param);
                         });

TEST(AlltoallTest, OverlappingOrNullBuffersAreInvalidArgument) {
  testing::run_gloo_world(2, 10s, [](GlooCommunicator& comm) {
    std::vector<float> buf(8);
    AlltoallOptions a;
    a.input = buf.data();
    a.output = buf.data() + 1;
    a.count = 2;
    try {
      alltoall(comm, a);
      ADD_FAILURE() << "overlapping buffers were accepted";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
      EXPECT_NE(std::string(e.what()).find("overlap"), std::string::npos) << e.what();
    }
    a.output = nullptr;
    EXPECT_THROW(alltoall(comm, a), Error);
    // Nothing was sent: the communicator still works.
    std::vector<float> out(4);
    a.input = buf.data();
    a.output = out.data();
    for (int i = 0; i < 4; ++i) buf[i] = static_cast<float>(10 * comm.rank() + i);
    alltoall(comm, a);
    const int r = comm.rank();
    EXPECT_EQ(out[0], static_cast<float>(2 * r));
    EXPECT_EQ(out[2], static_cast<float>(10 + 2 * r));
  });
}

}  // namespace
}  // namespace hpct::comm
