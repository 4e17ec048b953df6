#include "data/source/fetch_threads.h"

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <mutex>
#include <thread>

#include "data/source/short_slice.h"

namespace hpct::data {
namespace {

// Never destroyed: a file system may go during the exit's static destructors.
struct FetchThreads {
  std::mutex mu;
  std::condition_variable cv;
  struct Job {
    std::uint64_t id;
    std::function<void()> run;
  };
  std::deque<Job> jobs;       // guarded by mu
  std::uint64_t next_id = 0;  // guarded by mu
  int idle = 0;               // guarded by mu: threads waiting for a job
};
constexpr std::chrono::seconds kFetchThreadIdle{30};

FetchThreads& fetch_threads() {
  static FetchThreads* t = new FetchThreads;
  return *t;
}

// Set on a fetch thread whose job counted it idle already.
thread_local bool counted_idle = false;

}  // namespace

void fetch_thread_ending_job() {
  FetchThreads& t = fetch_threads();
  std::lock_guard<std::mutex> lock(t.mu);
  if (counted_idle) return;
  t.idle += 1;
  counted_idle = true;
}

namespace {

void fetch_thread_main() {
  ShortSlice::drop_inherited();
  FetchThreads& t = fetch_threads();
  std::unique_lock<std::mutex> lock(t.mu);
  while (true) {
    if (!counted_idle) t.idle += 1;
    counted_idle = false;
    const bool got = t.cv.wait_for(lock, kFetchThreadIdle, [&] { return !t.jobs.empty(); });
    t.idle -= 1;
    if (!got) return;
    std::function<void()> job = std::move(t.jobs.front().run);
    t.jobs.pop_front();
    lock.unlock();
    job();
    job = nullptr;
    lock.lock();
  }
}

}  // namespace

void run_on_fetch_thread(std::function<void()> job) {
  FetchThreads& t = fetch_threads();
  bool make = false;
  std::uint64_t id = 0;
  {
    std::lock_guard<std::mutex> lock(t.mu);
    id = ++t.next_id;
    t.jobs.push_back({id, std::move(job)});
    make = static_cast<int>(t.jobs.size()) > t.idle;
  }
  if (make) {
    try {
      std::thread(fetch_thread_main).detach();
    } catch (...) {
      std::lock_guard<std::mutex> lock(t.mu);
      auto it =
          std::find_if(t.jobs.begin(), t.jobs.end(), [&](const auto& j) { return j.id == id; });
      if (it == t.jobs.end()) return;  // a kept thread took it
      t.jobs.erase(it);
      throw;
    }
  }
  t.cv.notify_one();
}

}  // namespace hpct::data
