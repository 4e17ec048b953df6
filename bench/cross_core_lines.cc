// How fast cache lines move between CPU 0 and CPU 1 of this machine, every
// 100 ms for the given seconds: one JSON line per sample with
//   round_trip_ns     a line written by one CPU and answered by the other;
//   plain_store_GBps  CPU 1 storing 1 MiB that CPU 0 has just read (each
//                     store takes its line back from CPU 0's cache);
//   stream_store_GBps the same with non-temporal stores;
//   read_GBps         CPU 0 reading the 1 MiB CPU 1 stored plainly.
// On a VM whose vCPUs the host moves, stretches with a slow round trip show
// here; bench/shm_slow_lines.sh runs it beside the shared-memory allreduce
// (docs/comm.md). Build: g++ -O2 -mavx2 -pthread bench/cross_core_lines.cc
#include <immintrin.h>
#include <pthread.h>
#include <sched.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>

namespace {

using Clock = std::chrono::steady_clock;
constexpr size_t kFloats = (1 << 20) / sizeof(float);

alignas(64) std::atomic<int> ping{0};
alignas(64) std::atomic<int> pong{0};
alignas(64) std::atomic<int> order{0};  // > 0: store; odd plain, even non-temporal
alignas(64) std::atomic<int> stored{0};
alignas(64) std::atomic<long> store_ns{0};
alignas(64) std::atomic<bool> stop{false};

void pin(int cpu) {
  cpu_set_t s;
  CPU_ZERO(&s);
  CPU_SET(cpu, &s);
  pthread_setaffinity_np(pthread_self(), sizeof s, &s);
}

double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

// CPU 1: answers pings and stores the buffer when ordered to.
void answer(float* buf) {
  pin(1);
  int seen_ping = 0, seen_order = 0;
  float value = 1;
  while (!stop.load(std::memory_order_relaxed)) {
    const int p = ping.load(std::memory_order_acquire);
    if (p != seen_ping) pong.store(seen_ping = p, std::memory_order_release);
    const int o = order.load(std::memory_order_acquire);
    if (o == 0 || o == seen_order) continue;
    seen_order = o;
    const __m256 v = _mm256_set1_ps(value += 1);
    const auto t = Clock::now();
    if (o % 2 == 1) {
      for (size_t i = 0; i < kFloats; i += 8) _mm256_store_ps(buf + i, v);
    } else {
      for (size_t i = 0; i < kFloats; i += 8) _mm256_stream_ps(buf + i, v);
      _mm_sfence();
    }
    store_ns.store(static_cast<long>(seconds_since(t) * 1e9), std::memory_order_relaxed);
    stored.store(o, std::memory_order_release);
  }
}

}  // namespace

int main(int argc, char** argv) {
  const double seconds = argc > 1 ? std::atof(argv[1]) : 30;
  auto* buf = static_cast<float*>(std::aligned_alloc(64, kFloats * sizeof(float)));
  std::memset(buf, 0, kFloats * sizeof(float));
  std::thread t(answer, buf);
  pin(0);
  const auto end = Clock::now() + std::chrono::duration<double>(seconds);
  int v = 0, o = 0;
  float sink = 0;
  while (Clock::now() < end) {
    const auto t0 = Clock::now();
    constexpr int kPings = 2000;
    for (int i = 0; i < kPings; ++i) {
      ping.store(++v, std::memory_order_release);
      while (pong.load(std::memory_order_acquire) != v) {
      }
    }
    const double rt_ns = seconds_since(t0) / kPings * 1e9;
    double store_s[2] = {0, 0}, read_s = 0;
    for (int round = 0; round < 20; ++round) {
      const int plain = round % 2 == 0 ? 1 : 0;
      o = (o / 2 + 1) * 2 + plain;
      order.store(o, std::memory_order_release);
      while (stored.load(std::memory_order_acquire) != o) {
      }
      store_s[plain] += store_ns.load(std::memory_order_relaxed) * 1e-9;
      // Read it all (the next round's stores take these lines back).
      const auto r = Clock::now();
      __m256 acc = _mm256_setzero_ps();
      for (size_t i = 0; i < kFloats; i += 8) acc = _mm256_add_ps(acc, _mm256_load_ps(buf + i));
      float lanes[8];
      _mm256_storeu_ps(lanes, acc);
      sink += lanes[0];
      if (plain) read_s += seconds_since(r);
    }
    const double mib10 = 10.0 * kFloats * sizeof(float) / 1e9;
    std::printf("{\"t\":%.1f,\"round_trip_ns\":%.0f,\"plain_store_GBps\":%.2f,"
                "\"stream_store_GBps\":%.2f,\"read_GBps\":%.2f}\n",
                std::chrono::duration<double>(Clock::now().time_since_epoch()).count(), rt_ns,
                mib10 / store_s[1], mib10 / store_s[0], mib10 / read_s + sink * 0);
    std::fflush(stdout);
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  stop = true;
  t.join();
  std::free(buf);
  return 0;
}
