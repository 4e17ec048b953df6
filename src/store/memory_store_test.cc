#include "store/memory_store.h"

#include <gtest/gtest.h>

#include <thread>

#include "core/error.h"

namespace hpct::store {
namespace {

TEST(MemoryStore, SetGetAddRemove) {
  MemoryStore s;
  s.set("a", std::string("x\0y", 3));
  EXPECT_EQ(s.get("a", Millis(100)), std::string("x\0y", 3));
  EXPECT_EQ(s.add("n", 2), 2);
  EXPECT_EQ(s.add("n", -5), -3);
  EXPECT_TRUE(s.check({"a", "n"}));
  EXPECT_TRUE(s.remove("a"));
  EXPECT_FALSE(s.remove("a"));
  EXPECT_FALSE(s.check({"a"}));
}

TEST(MemoryStore, GetWaitsForAnotherThread) {
  MemoryStore s;
  std::thread t([&] {
    std::this_thread::sleep_for(Millis(20));
    s.set("late", "v");
  });
  EXPECT_EQ(s.get("late", Millis(5000)), "v");
  t.join();
}

TEST(MemoryStore, WaitTimesOutNamingMissingKeys) {
  MemoryStore s;
  s.set("here", "1");
  auto start = SteadyClock::now();
  try {
    s.wait({"here", "absent"}, Millis(50));
    FAIL() << "no timeout";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kTimeout);
    EXPECT_NE(std::string(e.what()).find("missing: absent"), std::string::npos) << e.what();
  }
  EXPECT_LT(SteadyClock::now() - start, Millis(2000));
}

TEST(PrefixStore, KeysAreNamespaced) {
  auto inner = std::make_shared<MemoryStore>();
  PrefixStore a("job1", inner), b("job2", inner);
  a.set("k", "1");
  b.set("k", "2");
  EXPECT_EQ(a.get("k", Millis(10)), "1");
  EXPECT_EQ(inner->get("job2/k", Millis(10)), "2");
}

}  // namespace
}  // namespace hpct::store
