// The store half of the NCCL start-up (bootstrap.h), on the CPU: ranks as
// threads meeting through one MemoryStore.
#include "comm/nccl/bootstrap.h"

#include <gtest/gtest.h>

#include <memory>
#include <thread>
#include <vector>

#include "core/error.h"
#include "store/memory_store.h"

namespace hpct::comm::nccl {
namespace {

using namespace std::chrono_literals;

TEST(NcclBootstrapTest, UniqueIdGoesFromRankZeroToEveryRank) {
  auto store = std::make_shared<store::MemoryStore>();
  const std::string id(128, '\x07');
  std::vector<std::string> got(4);
  std::vector<std::thread> ranks;
  for (int r = 1; r < 4; ++r) {
    ranks.emplace_back([&, r] { got[r] = wait_unique_id(*store, "world", r, 128, 5000ms); });
  }
  std::this_thread::sleep_for(20ms);  // the others are waiting before it is there
  publish_unique_id(*store, "world", id);
  for (auto& t : ranks) t.join();
  for (int r = 1; r < 4; ++r) EXPECT_EQ(got[r], id);
  // Another communicator's name is another key.
  try {
    wait_unique_id(*store, "other", 1, 128, 50ms);
    ADD_FAILURE() << "read another communicator's id";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kTimeout);
  }
}

TEST(NcclBootstrapTest, MissingRankZeroIsABoundedTimeoutNamingTheKey) {
  store::MemoryStore store;
  const auto start = SteadyClock::now();
  try {
    wait_unique_id(store, "grads", 3, 128, 200ms);
    ADD_FAILURE() << "no timeout";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kTimeout);
    const std::string m = e.what();
    EXPECT_NE(m.find("nccl/grads/unique_id"), std::string::npos) << m;
    EXPECT_NE(m.find("rank 3"), std::string::npos) << m;
    EXPECT_NE(m.find("rank 0"), std::string::npos) << m;
  }
  EXPECT_LT(SteadyClock::now() - start, 2s);
}

TEST(NcclBootstrapTest, IdOfTheWrongLengthIsAMismatch) {
  store::MemoryStore store;
  publish_unique_id(store, "world", std::string(64, 'x'));
  try {
    wait_unique_id(store, "world", 1, 128, 1000ms);
    ADD_FAILURE() << "accepted a 64-byte id";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kMismatch);
    EXPECT_NE(std::string(e.what()).find("64 bytes"), std::string::npos) << e.what();
  }
}

TEST(NcclBootstrapTest, DeviceIdentitiesAreExchangedAndSharingIsNamed) {
  auto store = std::make_shared<store::MemoryStore>();
  const std::vector<std::string> mine = {"h1/0000:1b:00.0", "h1/0000:2c:00.0", "h2/0000:1b:00.0",
                                         "h1/0000:2c:00.0"};
  std::vector<std::vector<std::string>> got(4);
  std::vector<std::thread> ranks;
  for (int r = 0; r < 4; ++r) {
    ranks.emplace_back(
        [&, r] { got[r] = exchange_device_identities(*store, "world", r, 4, mine[r], 5000ms); });
  }
  for (auto& t : ranks) t.join();
  for (int r = 0; r < 4; ++r) EXPECT_EQ(got[r], mine);
  EXPECT_EQ(describe_shared_devices(mine), "ranks 1 and 3 share GPU h1/0000:2c:00.0");
  EXPECT_EQ(describe_shared_devices({"h1/a", "h2/a", "h1/b"}), "");
  EXPECT_EQ(describe_shared_devices({}), "");
}

TEST(NcclBootstrapTest, RankThatNeverPublishesItsDeviceIsNamed) {
  store::MemoryStore store;
  try {
    exchange_device_identities(store, "world", 0, 3, "h/0", 100ms);
    ADD_FAILURE() << "no timeout";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kTimeout);
    EXPECT_NE(std::string(e.what()).find("ranks [1, 2]"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace hpct::comm::nccl
