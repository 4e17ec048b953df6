// Pacing: ranks run exactly the steps they are let through, park asleep
// between turns, and never wait unbounded.
#include "bench/pacer.h"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <mutex>
#include <thread>
#include <vector>

#include "core/error.h"

namespace hpct::bench {
namespace {

namespace fs = std::filesystem;

std::string page_path(const char* name) {
  auto p = fs::temp_directory_path() / ("hpct-pace-" + std::to_string(::getpid()) + "-" + name);
  fs::remove(p);
  return p.string();
}

TEST(Pacer, RanksRunOnlyTheStepsOfTheirTurn) {
  const std::string path = page_path("turns");
  PaceParent parent(path, 2);
  std::mutex mu;
  std::vector<int> ran[2];
  std::vector<std::thread> ranks;
  for (int r = 0; r < 2; ++r) {
    ranks.emplace_back([&, r] {
      PaceRank me(path, r, Millis(20000));
      for (int s = 0; s < 10; ++s) {
        me.before_step(s);
        std::lock_guard<std::mutex> lk(mu);
        ran[r].push_back(s);
      }
    });
  }
  auto never = [] { return false; };
  ASSERT_TRUE(parent.wait_parked(0, Millis(20000), never));
  {
    std::lock_guard<std::mutex> lk(mu);
    EXPECT_TRUE(ran[0].empty() && ran[1].empty()) << "a rank ran before its first turn";
  }
  parent.run_until(4);
  ASSERT_TRUE(parent.wait_parked(4, Millis(20000), never));
  {
    std::lock_guard<std::mutex> lk(mu);
    for (auto& steps : ran) EXPECT_EQ(steps, (std::vector<int>{0, 1, 2, 3}));
  }
  parent.run_until(10);
  for (auto& t : ranks) t.join();
  for (auto& steps : ran) EXPECT_EQ(steps.size(), 10u);
  fs::remove(path);
}

TEST(Pacer, ParentStopsWaitingWhenTheJobEnds) {
  const std::string path = page_path("ended");
  PaceParent parent(path, 2);
  std::atomic<bool> ended{false};
  std::thread job([&] {
    std::this_thread::sleep_for(Millis(200));
    ended = true;  // its ranks never reached step 0
  });
  const auto t0 = SteadyClock::now();
  EXPECT_FALSE(parent.wait_parked(0, Millis(20000), [&] { return ended.load(); }));
  EXPECT_LT(SteadyClock::now() - t0, Millis(5000));
  job.join();
  fs::remove(path);
}

TEST(Pacer, EveryWaitIsBoundedAndNamesWhatItWaitedFor) {
  const std::string path = page_path("bounded");
  PaceParent parent(path, 2);
  // Rank 1 never arrives: the parent's wait names it.
  try {
    parent.wait_parked(0, Millis(300), [] { return false; });
    ADD_FAILURE() << "waited for a rank that never came without a bound";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kTimeout);
    EXPECT_NE(std::string(e.what()).find("rank(s) 0 1"), std::string::npos) << e.what();
  }
  // A rank never let through gives up after its bound.
  PaceRank rank(path, 0, Millis(300));
  const auto t0 = SteadyClock::now();
  try {
    rank.before_step(0);
    ADD_FAILURE() << "a rank waited for its turn without a bound";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kTimeout);
    EXPECT_NE(std::string(e.what()).find("timed step 0"), std::string::npos) << e.what();
  }
  EXPECT_LT(SteadyClock::now() - t0, Millis(3000));
  fs::remove(path);
}

TEST(Pacer, CancelledRanksStopAtTheirNextTurn) {
  const std::string path = page_path("cancel");
  PaceParent parent(path, 1);
  std::exception_ptr error;
  int ran = 0;
  std::thread rank([&] {
    try {
      PaceRank me(path, 0, Millis(20000));
      for (int s = 0; s < 10; ++s, ++ran) me.before_step(s);
    } catch (...) {
      error = std::current_exception();
    }
  });
  ASSERT_TRUE(parent.wait_parked(0, Millis(20000), [] { return false; }));
  const auto t0 = SteadyClock::now();
  parent.cancel();
  rank.join();
  EXPECT_LT(SteadyClock::now() - t0, Millis(3000));
  EXPECT_EQ(ran, 0);
  ASSERT_TRUE(error);
  try {
    std::rethrow_exception(error);
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kPeerFailure);
    EXPECT_NE(std::string(e.what()).find("cancelled"), std::string::npos) << e.what();
  }
  fs::remove(path);
}

TEST(Pacer, RankStopsWaitingWhenThePacingProcessIsGone) {
  const std::string path = page_path("orphan");
  pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    PaceParent parent(path, 1);  // creates the page, then the process ends
    ::_exit(0);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  PaceRank rank(path, 0, Millis(20000));
  const auto t0 = SteadyClock::now();
  try {
    rank.before_step(0);
    ADD_FAILURE() << "a rank kept waiting for a process that is gone";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kPeerFailure);
    EXPECT_NE(std::string(e.what()).find("pid " + std::to_string(child)), std::string::npos) << e.what();
  }
  EXPECT_LT(SteadyClock::now() - t0, Millis(3000));
  fs::remove(path);
}

}  // namespace
}  // namespace hpct::bench
