// A shuffle buffer, as WebDataset and tf.data use to shuffle a stream that
// does not fit in memory: items enter in stream order and leave in a random
// order drawn from a bounded window.
//
// The rules are WebDataset's: while fewer than `initial` items are held the
// buffer takes two items per item it gives; it grows to `capacity` and
// stays there; at the end of the stream it drains in random order. Output is
// a pure function of the input order and the seed.
#pragma once

#include <cstddef>
#include <optional>
#include <utility>
#include <vector>

#include "data/random.h"

namespace hpct::data {

// Not thread-safe. Holds at most capacity items (capacity >= 1).
template <class T>
class ShuffleBuffer {
 public:
  ShuffleBuffer(size_t capacity, size_t initial, Rng rng)
      : capacity_(capacity < 1 ? 1 : capacity),
        initial_(initial > capacity_ ? capacity_ : initial),
        rng_(rng) {}

  // Whether the stream should add another item before the next take().
  bool wants_more() const { return items_.size() < initial_ || items_.size() < capacity_; }
  // Whether take() may give an item now (end_of_input: the stream is done).
  bool ready(bool end_of_input) const {
    return !items_.empty() && (end_of_input || items_.size() >= initial_);
  }
  void add(T item) { items_.push_back(std::move(item)); }
  // A uniformly chosen held item. Precondition: !empty().
  T take() {
    size_t k = static_cast<size_t>(rng_.below(items_.size()));
    std::swap(items_[k], items_.back());
    T out = std::move(items_.back());
    items_.pop_back();
    return out;
  }
  bool empty() const { return items_.empty(); }
  size_t size() const { return items_.size(); }
  const std::vector<T>& items() const { return items_; }

 private:
  size_t capacity_;
  size_t initial_;
  Rng rng_;
  std::vector<T> items_;
};

// The whole stream through a buffer: each input item adds one, and a second
// one while the buffer is below capacity, then one is taken when ready.
template <class T>
std::vector<T> shuffle_stream(const std::vector<T>& in, size_t capacity, size_t initial, Rng rng) {
  ShuffleBuffer<T> buf(capacity, initial, rng);
  std::vector<T> out;
  out.reserve(in.size());
  size_t i = 0;
  while (i < in.size()) {
    buf.add(in[i++]);
    if (buf.wants_more() && i < in.size()) buf.add(in[i++]);
    if (buf.ready(i == in.size())) out.push_back(buf.take());
  }
  while (!buf.empty()) out.push_back(buf.take());
  return out;
}

}  // namespace hpct::data
