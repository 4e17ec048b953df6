// A FIFO with a capacity, for handing work between threads without letting
// a fast producer grow memory without bound. Every wait is bounded and
// gives up early when the queue is closed.
#pragma once

#include <condition_variable>
#include <deque>
#include <mutex>
#include <optional>

#include "core/clock.h"

namespace hpct::data {

// Thread-safe; any number of producers and consumers.
template <class T>
class BoundedQueue {
 public:
  explicit BoundedQueue(size_t capacity) : capacity_(capacity < 1 ? 1 : capacity) {}

  // Blocks while full, up to timeout. False when closed or timed out.
  bool push(T item, Millis timeout) {
    std::unique_lock<std::mutex> lock(mu_);
    if (!changed_.wait_for(lock, timeout, [&] { return closed_ || items_.size() < capacity_; }) ||
        closed_) {
      return false;
    }
    items_.push_back(std::move(item));
    if (items_.size() > high_water_) high_water_ = items_.size();
    changed_.notify_all();
    return true;
  }
  // Blocks while empty, up to timeout. nullopt when timed out, or closed and drained.
  std::optional<T> pop(Millis timeout) {
    std::unique_lock<std::mutex> lock(mu_);
    if (!changed_.wait_for(lock, timeout, [&] { return closed_ || !items_.empty(); })) return std::nullopt;
    if (items_.empty()) return std::nullopt;
    T out = std::move(items_.front());
    items_.pop_front();
    changed_.notify_all();
    return out;
  }
  // Wakes every waiter; later pushes fail, pops drain what is left.
  void close() {
    std::lock_guard<std::mutex> lock(mu_);
    closed_ = true;
    changed_.notify_all();
  }
  bool closed() const {
    std::lock_guard<std::mutex> lock(mu_);
    return closed_;
  }
  size_t high_water() const {
    std::lock_guard<std::mutex> lock(mu_);
    return high_water_;
  }

 private:
  const size_t capacity_;
  mutable std::mutex mu_;
  std::condition_variable changed_;
  std::deque<T> items_;      // guarded by mu_
  bool closed_ = false;      // guarded by mu_
  size_t high_water_ = 0;    // guarded by mu_
};

}  // namespace hpct::data
