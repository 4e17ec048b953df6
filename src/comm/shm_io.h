// Where a shared-memory allreduce's elements live (shm_allreduce.cc): one
// buffer, or a list of segments read and written in place. Private to
// src/comm/.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "comm/communicator.h"
#include "comm/reduce_simd.h"

namespace hpct::comm {

// An Io's read: into a slot (to_shared: the stores chosen by speed) or into
// a private scratch block.
inline void copy_out(std::uint8_t* to, const std::uint8_t* from, std::size_t bytes, bool to_shared) {
  if (to_shared) {
    simd::copy_to_shared(to, from, bytes);
  } else {
    simd::copy(to, from, bytes);
  }
}

// Where an allreduce's elements live; offsets count elements from the start.
// read() copies n elements out, write() copies n in, view() points at n
// elements to read (copying them into scratch only when they span buffers).
class OneBuffer {
 public:
  OneBuffer(const void* in, void* out, std::size_t es)
      : src_(static_cast<const std::uint8_t*>(in)),
        dst_(static_cast<std::uint8_t*>(out)),
        es_(es) {}
  void read(std::size_t at, std::size_t n, std::uint8_t* to, bool to_shared = false) const {
    copy_out(to, src_ + at * es_, n * es_, to_shared);
  }
  void write(std::size_t at, std::size_t n, const std::uint8_t* from) const {
    simd::copy(dst_ + at * es_, from, n * es_);
  }
  const std::uint8_t* view(std::size_t at, std::size_t /*n*/, std::uint8_t* /*scratch*/) const {
    return src_ + at * es_;
  }
  // The output's n elements at `at` as one span to write.
  std::uint8_t* span(std::size_t at, std::size_t /*n*/) const { return dst_ + at * es_; }

 private:
  const std::uint8_t* src_;
  std::uint8_t* dst_;
  std::size_t es_;
};

class Segments {
 public:
  Segments(const std::vector<BufferSegment>& segs, std::size_t es) : segs_(segs), es_(es) {
    starts_.reserve(segs.size());
    std::size_t at = 0;
    for (const auto& s : segs) {
      starts_.push_back(at);
      at += s.count;
    }
  }
  void read(std::size_t at, std::size_t n, std::uint8_t* to, bool to_shared = false) const {
    walk(at, n, [&](std::uint8_t* p, std::size_t k, std::size_t done) {
      copy_out(to + done * es_, p, k * es_, to_shared);
    });
  }
  void write(std::size_t at, std::size_t n, const std::uint8_t* from) const {
    walk(at, n, [&](std::uint8_t* p, std::size_t k, std::size_t done) {
      simd::copy(p, from + done * es_, k * es_);
    });
  }
  const std::uint8_t* view(std::size_t at, std::size_t n, std::uint8_t* scratch) const {
    if (std::uint8_t* p = span(at, n)) return p;
    read(at, n, scratch);
    return scratch;
  }
  // The n elements at `at` when one segment holds them all, else null.
  std::uint8_t* span(std::size_t at, std::size_t n) const {
    const std::size_t i = index_of(at);
    if (at - starts_[i] + n > segs_[i].count) return nullptr;
    return static_cast<std::uint8_t*>(segs_[i].data) + (at - starts_[i]) * es_;
  }

 private:
  std::size_t index_of(std::size_t at) const {
    // The last segment starting at or before `at` that is not empty there.
    auto it = std::upper_bound(starts_.begin(), starts_.end(), at);
    std::size_t i = static_cast<std::size_t>(it - starts_.begin()) - 1;
    while (i + 1 < segs_.size() && at - starts_[i] >= segs_[i].count) ++i;
    return i;
  }
  template <typename F>
  void walk(std::size_t at, std::size_t n, F&& f) const {
    if (n == 0) return;
    std::size_t done = 0;
    for (std::size_t i = index_of(at); done < n; ++i) {
      const std::size_t off = at + done - starts_[i];
      if (off >= segs_[i].count) continue;
      const std::size_t k = std::min(segs_[i].count - off, n - done);
      f(static_cast<std::uint8_t*>(segs_[i].data) + off * es_, k, done);
      done += k;
    }
  }

  const std::vector<BufferSegment>& segs_;
  std::size_t es_;
  std::vector<std::size_t> starts_;
};


}  // namespace hpct::comm
