// Deadlines: every wait in hpctrain has one, and says what it waited for.
#pragma once

#include <chrono>

namespace hpct {

using SteadyClock = std::chrono::steady_clock;
using Millis = std::chrono::milliseconds;

// Wall-clock time in nanoseconds since the Unix epoch (comparable across hosts).
inline long long unix_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// Milliseconds from a (possibly fractional) number of seconds.
inline Millis seconds_to_millis(double s) { return Millis(static_cast<long long>(s * 1000.0)); }

class Deadline {
 public:
  explicit Deadline(Millis budget) : start_(SteadyClock::now()), end_(start_ + budget), budget_(budget) {}

  bool expired() const { return SteadyClock::now() >= end_; }
  // Time left, never negative.
  Millis remaining() const {
    auto left = std::chrono::duration_cast<Millis>(end_ - SteadyClock::now());
    return left.count() > 0 ? left : Millis(0);
  }
  Millis elapsed() const {
    return std::chrono::duration_cast<Millis>(SteadyClock::now() - start_);
  }
  Millis budget() const { return budget_; }
  SteadyClock::time_point end() const { return end_; }

 private:
  SteadyClock::time_point start_;
  SteadyClock::time_point end_;
  Millis budget_;
};

}  // namespace hpct
