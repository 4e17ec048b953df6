// Communicator operations on libtorch tensors.
//
// Thin wrappers over the raw-buffer operations in communicator.h: they check
// that a tensor is defined, on the CPU or a CUDA device and contiguous, map
// its dtype, and pass its storage (a CUDA tensor's through a host copy:
// these calls block; the engine is the asynchronous device path). libtorch stays out of this header (at::Tensor is only
// declared), so code that includes it compiles fast.
//
// Blocking, threading and failure rules are those of communicator.h.
#pragma once

#include <cstdint>
#include <vector>

#include "comm/communicator.h"

namespace at {
class Tensor;
}

namespace hpct::comm {

// The DataType of a tensor; InvalidArgument naming the dtype and the ones
// that are supported otherwise.
DataType dtype_of(const at::Tensor& t);

// In place: every rank's t becomes the reduction over ranks.
void allreduce(Communicator& comm, at::Tensor& t, ReduceOp op = ReduceOp::kSum,
               Millis timeout = Millis(0), std::uint32_t tag = 0);

// t on root is copied into t on every other rank (same shape and dtype).
void broadcast(Communicator& comm, at::Tensor& t, int root, Millis timeout = Millis(0),
               std::uint32_t tag = 0);

// Returns a tensor of shape [size, *t.shape] holding every rank's t.
at::Tensor allgather(Communicator& comm, const at::Tensor& t, Millis timeout = Millis(0),
                     std::uint32_t tag = 0);

// Ranks may contribute different numbers of rows (first dimension); the
// rest of the shape must agree. Returns the rows of every rank in rank order.
at::Tensor allgatherv(Communicator& comm, const at::Tensor& t, Millis timeout = Millis(0),
                      std::uint32_t tag = 0);

// input's first dimension is split into size equal blocks; output receives
// the reduction of block `rank`.
void reduce_scatter(Communicator& comm, const at::Tensor& input, at::Tensor& output,
                    ReduceOp op = ReduceOp::kSum, Millis timeout = Millis(0),
                    std::uint32_t tag = 0);

void send(Communicator& comm, const at::Tensor& t, int peer, std::uint32_t tag = 0,
          Millis timeout = Millis(0));
void recv(Communicator& comm, at::Tensor& t, int peer, std::uint32_t tag = 0,
          Millis timeout = Millis(0));

}  // namespace hpct::comm
