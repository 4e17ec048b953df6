#include "comm/testing/thread_world.h"

#include <gtest/gtest.h>

#include <exception>
#include <thread>
#include <vector>

#include "store/memory_store.h"

namespace hpct::comm::testing {

std::shared_ptr<store::Store> test_store() {
  const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
  std::string name = info ? std::string(info->test_suite_name()) + "." + info->name() : "world";
  return std::make_shared<store::PrefixStore>(name, std::make_shared<store::MemoryStore>());
}

GlooOptions gloo_options_for(int rank, int size, std::shared_ptr<store::Store> store,
                             Millis timeout) {
  GlooOptions o;
  o.rank = rank;
  o.size = size;
  o.store = std::move(store);
  o.timeout = timeout;
  o.logger = Logger(LogLevel::kWarn, "all", rank, [](const std::string&) {});
  return o;
}

void run_gloo_world(int size, Millis timeout, const std::function<void(GlooCommunicator&)>& fn,
                    bool shm) {
  auto store = test_store();
  std::vector<std::exception_ptr> errors(size);
  std::vector<std::thread> threads;
  for (int r = 0; r < size; ++r) {
    threads.emplace_back([&, r] {
      try {
        GlooOptions o = gloo_options_for(r, size, store, timeout);
        o.shm = shm;
        auto comm = GlooCommunicator::connect(o);
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

}  // namespace hpct::comm::testing
