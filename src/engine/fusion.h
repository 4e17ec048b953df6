// Fusion: which ready tensors travel together, and the buffer they are
// packed into.
//
// plan_fusion() groups allreduce requests, and reduce-scatter requests, of
// the same kind, dtype, op and compression, in list order, into groups of at most `threshold` wire bytes
// (HPCT_FUSION_BYTES); a tensor larger than the threshold travels alone.
// Broadcasts travel alone. It is a pure function of its input, so every rank
// that runs it on the same list (the cached fast path) gets the same groups.
//
// FusionBuffer is the staging memory of a group whose tensors are not already
// adjacent in memory (the engine sends adjacent ones in place, see engine.cc).
// Owned and used by the engine's background thread only.
#pragma once

#include <cstddef>
#include <memory>
#include <vector>

#include "engine/message.h"

namespace hpct::engine {

// Bytes one element occupies on the wire for this request (2 when compressed).
std::size_t wire_element_size(const Request& r);

std::vector<Response> plan_fusion(const std::vector<const Request*>& ready, std::size_t threshold);

class FusionBuffer {
 public:
  FusionBuffer() = default;
  FusionBuffer(const FusionBuffer&) = delete;
  FusionBuffer& operator=(const FusionBuffer&) = delete;

  // At least `bytes` of 64-byte aligned memory; grows, never shrinks, so the
  // steady state allocates nothing. Invalidates earlier pointers when it grows.
  void* reserve(std::size_t bytes);
  std::size_t capacity() const { return capacity_; }

 private:
  struct Free {
    void operator()(void* p) const;
  };
  std::unique_ptr<void, Free> data_;
  std::size_t capacity_ = 0;
};

}  // namespace hpct::engine
