// The Gloo backend's ring paths: allreduce by Gloo's ring (with our
// reduce_elements, so every dtype reduces alike on every backend) and our own
// ring reduce-scatter over Gloo's unbound buffers.
#include <gloo/allreduce.h>
#include <gloo/transport/unbound_buffer.h>
#include <gloo/types.h>

#include <algorithm>
#include <cstring>

#include "comm/gloo/detail.h"
#include "comm/reduce.h"

namespace hpct::comm {

using namespace gloo_detail;

void GlooCommunicator::ring_allreduce(const AllreduceOptions& o) {
  run(describe_op("allreduce", o.count, o.dtype), o.timeout, -1, [&] {
    if (o.count == 0) return;
    if (size_ > 1) {
      gloo::AllreduceOptions g(context_);
      with_element_type(o.dtype, [&](auto t) {
        using T = decltype(t);
        T* out = static_cast<T*>(o.output);
        // Gloo reads the input only; its API just lacks the const.
        T* in = static_cast<T*>(const_cast<void*>(o.input));
        if (in != out) g.setInput(in, o.count);
        g.setOutput(out, o.count);
      });
      const DataType dtype = o.dtype;
      const ReduceOp op = o.op;
      g.setReduceFunction([dtype, op](void* c, const void* a, const void* b, size_t n) {
        reduce_elements(c, a, b, n, dtype, op);
      });
      g.setAlgorithm(gloo::AllreduceOptions::Algorithm::RING);
      g.setTag(o.tag);
      g.setTimeout(o.timeout);
      gloo::allreduce(g);
    } else if (o.input != o.output) {
      std::memmove(o.output, o.input, o.count * dtype_size(o.dtype));
    }
    if (o.op == ReduceOp::kAvg) finish_average(o.output, o.count, o.dtype, size_);
  });
}

void GlooCommunicator::do_reduce_scatter(const ReduceScatterOptions& o) {
  run(describe_op("reduce_scatter", o.count * size_, o.dtype), o.timeout, -1, [&] {
    if (o.count == 0) return;
    if (size_ == 1) {
      if (o.input != o.output) std::memmove(o.output, o.input, o.count * dtype_size(o.dtype));
    } else {
      ring_reduce_scatter(o);
    }
    if (o.op == ReduceOp::kAvg) finish_average(o.output, o.count, o.dtype, size_);
  });
}

void GlooCommunicator::do_reduce_scatter_v(const ReduceScatterOptions& o) {
  size_t total = 0;
  for (size_t c : o.counts) total += c;
  const size_t es = dtype_size(o.dtype);
  const size_t mine = o.counts[static_cast<size_t>(rank_)];
  size_t before = 0;
  for (int p = 0; p < rank_; ++p) before += o.counts[static_cast<size_t>(p)];
  if (shm_) {
    std::vector<unsigned char> all(total * es);
    run_shm(total, o.dtype, o.timeout, [&](const Deadline& d) {
      shm_->allreduce(o.input, all.data(), total, o.dtype, o.op, d);
    });
    if (mine > 0) std::memcpy(o.output, all.data() + before * es, mine * es);
    return;
  }
  if (direct_ != nullptr) {
    run(describe_op("reduce_scatter", total, o.dtype), o.timeout, -1,
        [&] { direct_->reduce_scatter(o.input, o.output, o.counts, o.dtype, o.op, Deadline(o.timeout)); });
    return;
  }
  Communicator::do_reduce_scatter_v(o);
}

// Ring reduce-scatter: in step s (0..n-2) rank r sends its partial sum of
// block (r-s-1) to r+1 and receives the partial sum of block (r-s-2) from
// r-1, adding its own input for that block. After n-1 steps the block it
// received last is block r, reduced over every rank. Each rank sends and
// receives (n-1)/n of the input, the minimum for this op.
void GlooCommunicator::ring_reduce_scatter(const ReduceScatterOptions& o) {
  const int n = size_;
  const size_t bytes = o.count * dtype_size(o.dtype);
  const int right = (rank_ + 1) % n, left = (rank_ + n - 1) % n;
  const Deadline deadline(o.timeout);
  const auto* input = static_cast<const unsigned char*>(o.input);
  std::vector<unsigned char> partial(bytes), incoming(bytes);
  auto in_buf = context_->createUnboundBuffer(const_cast<unsigned char*>(input), bytes * n);
  auto partial_buf = context_->createUnboundBuffer(partial.data(), bytes);
  auto incoming_buf = context_->createUnboundBuffer(incoming.data(), bytes);
  const std::uint64_t slot = gloo::Slot::build(kReduceScatterSlotPrefix, o.tag);
  for (int s = 0; s < n - 1; ++s) {
    const int send_block = ((rank_ - s - 1) % n + n) % n;
    const int recv_block = ((rank_ - s - 2) % n + n) % n;
    incoming_buf->recv(left, slot);
    gloo::transport::UnboundBuffer& out = s == 0 ? *in_buf : *partial_buf;
    out.send(right, slot, s == 0 ? send_block * bytes : 0, bytes);
    wait_recv(*incoming_buf, deadline);
    wait_send(out, deadline);  // partial may be overwritten only after this
    void* dst = s == n - 2 ? o.output : partial.data();
    reduce_elements(dst, incoming.data(), input + recv_block * bytes, o.count, o.dtype, o.op);
  }
}

}  // namespace hpct::comm
