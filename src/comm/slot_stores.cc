#include "comm/slot_stores.h"

#include <algorithm>

#include "core/futex.h"

namespace hpct::comm {

double SlotStoreChoice::typical(std::size_t bytes) const {
  const Kept& k = kept_[bytes > kSmallPieceBytes ? 1 : 0];
  if (k.n < kMinKept) return 0;
  std::array<double, kKept> v = k.speeds;
  auto mid = v.begin() + k.n / 2;
  std::nth_element(v.begin(), mid, v.begin() + k.n);
  return *mid;
}

void SlotStoreChoice::note_round_trip(Clock::time_point now, double ns) {
  slow_in_a_row_ = 0;
  stream_until_ = ns > kSlowRoundTripNs ? now + kRoundTripHold : now;
}

void SlotStoreChoice::note_plain_piece(Clock::time_point now, std::size_t bytes,
                                       double bytes_per_s) {
  const double usual = typical(bytes);
  const bool slow = bytes_per_s < kSlowBytesPerS || (usual > 0 && bytes_per_s < usual / kSlowFactor);
  if (slow) {
    if (++slow_in_a_row_ >= kSlowInARow) {
      stream_until_ = now + kStreamFor;
      slow_in_a_row_ = 0;
    }
    return;
  }
  slow_in_a_row_ = 0;
  Kept& k = kept_[bytes > kSmallPieceBytes ? 1 : 0];
  k.speeds[static_cast<std::size_t>(k.next)] = bytes_per_s;
  k.next = (k.next + 1) % kKept;
  k.n = std::min(k.n + 1, kKept);
}

double time_line_round_trips(std::atomic<std::uint64_t>* mine,
                             const std::atomic<std::uint64_t>* theirs, bool starts,
                             std::uint64_t first, int rounds, std::chrono::microseconds bound) {
  using Clock = std::chrono::steady_clock;
  const auto give_up = Clock::now() + bound;
  auto wait_for = [&](std::uint64_t v) {
    for (unsigned i = 1; theirs->load(std::memory_order_acquire) != v; ++i) {
      if (i % 64 == 0 && Clock::now() > give_up) return false;
      cpu_relax();
    }
    return true;
  };
  auto ns_since = [](Clock::time_point t) {
    return std::chrono::duration<double, std::nano>(Clock::now() - t).count();
  };
  Clock::time_point t0;
  if (starts) {
    t0 = Clock::now();
    for (int i = 0; i < rounds; ++i) {
      mine->store(first + static_cast<std::uint64_t>(i), std::memory_order_release);
      if (!wait_for(first + static_cast<std::uint64_t>(i))) return -1;
    }
    return ns_since(t0) / rounds;
  }
  for (int i = 0; i < rounds; ++i) {
    if (!wait_for(first + static_cast<std::uint64_t>(i))) return -1;
    if (i == 0) t0 = Clock::now();
    mine->store(first + static_cast<std::uint64_t>(i), std::memory_order_release);
  }
  return ns_since(t0) / (rounds - 1);
}

}  // namespace hpct::comm
