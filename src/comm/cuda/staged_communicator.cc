#include "comm/cuda/staged_communicator.h"

#include <algorithm>
#include <utility>

#include "core/error.h"

namespace hpct::comm {

// One operation: its deadline, its name for messages, and the latch check
// before and the latch after. Every step gets what is left of the timeout.
class StagedCommunicator::Op {
 public:
  Op(StagedCommunicator& c, const char* op, size_t bytes, Millis timeout)
      : c_(c), deadline_(timeout) {
    what_ = std::string("staged ") + op + " of " + std::to_string(bytes) + " bytes on rank " +
            std::to_string(c.rank()) + " of " + std::to_string(c.size()) + " (" +
            c.memory_->name() + " via " + c.host_.backend_name() + ")";
    c_.latch_.throw_if_failed();
  }

  // What is left of the timeout; Timeout when nothing is.
  Millis left() const {
    if (deadline_.expired()) {
      c_.latch_.fail(Error(ErrorCode::kTimeout, what_ + ": timed out after " +
                                                    std::to_string(deadline_.budget().count()) + " ms"));
    }
    return deadline_.remaining();
  }

  void synchronize(const char* step) { c_.memory_->synchronize(left(), what_ + ": " + step); }

  // Runs fn; an hpct::Error from it breaks the communicator, named.
  template <typename Fn>
  void run(Fn&& fn) {
    try {
      fn();
    } catch (const Error& e) {
      if (c_.latch_.failed()) throw;
      std::string m = e.what();
      if (m.rfind(what_, 0) != 0) m = what_ + ": " + m;  // copies name the op already
      // Refused arguments sent nothing: the communicator is still whole.
      if (e.code() == ErrorCode::kInvalidArgument) throw Error(e.code(), m);
      c_.latch_.fail(Error(e.code(), m));
    }
  }

 private:
  StagedCommunicator& c_;
  Deadline deadline_;
  std::string what_;
};

StagedCommunicator::StagedCommunicator(Communicator& host, std::unique_ptr<DeviceMemory> memory)
    : Communicator(host.default_timeout(), host.rank(), host.size()),
      host_(host),
      memory_(std::move(memory)),
      name_(std::string("staged-") + host.backend_name()) {}

StagedCommunicator::StagedCommunicator(std::unique_ptr<Communicator> host,
                                       std::unique_ptr<DeviceMemory> memory)
    : StagedCommunicator(*host, std::move(memory)) {
  owned_ = std::move(host);
}

StagedCommunicator::~StagedCommunicator() {
  // After a failure a copy may still be running into the buffer: leak it.
  if (!latch_.failed()) memory_->free_pinned(staging_);
}

std::string StagedCommunicator::algorithm(OpKind op, size_t bytes) const {
  return "staged:" + host_.algorithm(op, bytes);
}

char* StagedCommunicator::staging(size_t bytes) {
  if (bytes <= capacity_) return staging_;
  const size_t grown = std::max(bytes, capacity_ * 2);
  void* fresh = memory_->alloc_pinned(grown);
  memory_->free_pinned(staging_);
  staging_ = static_cast<char*>(fresh);
  capacity_ = grown;
  ++allocations_;
  return staging_;
}

void StagedCommunicator::do_allreduce(const AllreduceOptions& o) {
  const size_t bytes = o.count * dtype_size(o.dtype);
  if (bytes == 0) return;  // every rank passes the same count
  Op op(*this, "allreduce", bytes, o.timeout);
  op.run([&] {
    char* buf = staging(bytes);
    memory_->copy_to_host(buf, o.input, bytes);
    op.synchronize("copy to the host");
    AllreduceOptions h = o;
    h.input = buf;
    h.output = buf;
    h.timeout = op.left();
    allreduce(host_, h);
    memory_->copy_to_device(o.output, buf, bytes);
    op.synchronize("copy to the device");
  });
}

bool StagedCommunicator::do_allreduce_segments(const AllreduceSegmentsOptions& o) {
  const size_t esize = dtype_size(o.dtype);
  size_t count = 0;
  for (const auto& s : o.segments) count += s.count;
  if (count == 0) return true;
  Op op(*this, "allreduce", count * esize, o.timeout);
  op.run([&] {
    char* buf = staging(count * esize);
    size_t at = 0;
    for (const auto& s : o.segments) {
      memory_->copy_to_host(buf + at, s.data, s.count * esize);
      at += s.count * esize;
    }
    op.synchronize("copy of the segments to the host");
    AllreduceOptions h;
    h.input = buf;
    h.output = buf;
    h.count = count;
    h.dtype = o.dtype;
    h.op = o.op;
    h.tag = o.tag;
    h.timeout = op.left();
    allreduce(host_, h);
    at = 0;
    for (const auto& s : o.segments) {
      memory_->copy_to_device(s.data, buf + at, s.count * esize);
      at += s.count * esize;
    }
    op.synchronize("copy of the segments to the device");
  });
  return true;
}

void StagedCommunicator::do_broadcast(const BroadcastOptions& o) {
  const size_t bytes = o.count * dtype_size(o.dtype);
  if (bytes == 0) return;
  Op op(*this, "broadcast", bytes, o.timeout);
  op.run([&] {
    char* buf = staging(bytes);
    const bool root = o.root == rank_;
    if (root) {
      memory_->copy_to_host(buf, o.buffer, bytes);
      op.synchronize("copy to the host");
    }
    BroadcastOptions h = o;
    h.buffer = buf;
    h.timeout = op.left();
    broadcast(host_, h);
    if (!root) {
      memory_->copy_to_device(o.buffer, buf, bytes);
      op.synchronize("copy to the device");
    }
  });
}

void StagedCommunicator::do_allgatherv(const AllgathervOptions& o) {
  const size_t esize = dtype_size(o.dtype);
  size_t total = 0;
  for (size_t c : o.counts) total += c;
  if (total == 0) return;
  const size_t in_bytes = o.counts[rank_] * esize;
  const size_t out_at = staged_output_offset(in_bytes);
  Op op(*this, "allgather", total * esize, o.timeout);
  op.run([&] {
    char* buf = staging(out_at + total * esize);
    memory_->copy_to_host(buf, o.input, in_bytes);
    op.synchronize("copy to the host");
    AllgathervOptions h = o;
    h.input = buf;
    h.output = buf + out_at;
    h.timeout = op.left();
    allgatherv(host_, h);
    memory_->copy_to_device(o.output, buf + out_at, total * esize);
    op.synchronize("copy to the device");
  });
}

void StagedCommunicator::do_reduce_scatter(const ReduceScatterOptions& o) {
  const size_t out_bytes = o.count * dtype_size(o.dtype);
  if (out_bytes == 0) return;
  const size_t in_bytes = out_bytes * static_cast<size_t>(size_);
  const size_t out_at = staged_output_offset(in_bytes);
  Op op(*this, "reduce_scatter", in_bytes, o.timeout);
  op.run([&] {
    char* buf = staging(out_at + out_bytes);
    memory_->copy_to_host(buf, o.input, in_bytes);
    op.synchronize("copy to the host");
    ReduceScatterOptions h = o;
    h.input = buf;
    h.output = buf + out_at;
    h.timeout = op.left();
    reduce_scatter(host_, h);
    memory_->copy_to_device(o.output, buf + out_at, out_bytes);
    op.synchronize("copy to the device");
  });
}

void StagedCommunicator::do_reduce_scatter_v(const ReduceScatterOptions& o) {
  size_t total = 0;
  for (size_t c : o.counts) total += c;
  const size_t in_bytes = total * dtype_size(o.dtype);
  const size_t out_bytes = o.counts[static_cast<size_t>(rank_)] * dtype_size(o.dtype);
  if (in_bytes == 0) return;
  const size_t out_at = staged_output_offset(in_bytes);
  Op op(*this, "reduce_scatter", in_bytes, o.timeout);
  op.run([&] {
    char* buf = staging(out_at + out_bytes);
    memory_->copy_to_host(buf, o.input, in_bytes);
    op.synchronize("copy to the host");
    ReduceScatterOptions h = o;
    h.input = buf;
    h.output = buf + out_at;
    h.timeout = op.left();
    reduce_scatter(host_, h);
    if (out_bytes > 0) memory_->copy_to_device(o.output, buf + out_at, out_bytes);
    op.synchronize("copy to the device");
  });
}

void StagedCommunicator::do_alltoall(const AlltoallOptions& o) {
  const size_t bytes = o.count * dtype_size(o.dtype) * static_cast<size_t>(size_);
  if (bytes == 0) return;
  const size_t out_at = staged_output_offset(bytes);
  Op op(*this, "alltoall", bytes, o.timeout);
  op.run([&] {
    char* buf = staging(out_at + bytes);
    memory_->copy_to_host(buf, o.input, bytes);
    op.synchronize("copy to the host");
    AlltoallOptions h = o;
    h.input = buf;
    h.output = buf + out_at;
    h.timeout = op.left();
    alltoall(host_, h);
    memory_->copy_to_device(o.output, buf + out_at, bytes);
    op.synchronize("copy to the device");
  });
}

void StagedCommunicator::do_send(const SendOptions& o) {
  const size_t bytes = o.count * dtype_size(o.dtype);
  Op op(*this, "send", bytes, o.timeout);
  op.run([&] {
    SendOptions h = o;
    if (bytes > 0) {
      char* buf = staging(bytes);
      memory_->copy_to_host(buf, o.data, bytes);
      op.synchronize("copy to the host");
      h.data = buf;
    }
    h.timeout = op.left();
    send(host_, h);
  });
}

void StagedCommunicator::do_recv(const RecvOptions& o) {
  const size_t bytes = o.count * dtype_size(o.dtype);
  Op op(*this, "recv", bytes, o.timeout);
  op.run([&] {
    RecvOptions h = o;
    char* buf = bytes > 0 ? staging(bytes) : nullptr;
    if (bytes > 0) h.data = buf;
    h.timeout = op.left();
    recv(host_, h);
    if (bytes > 0) {
      memory_->copy_to_device(o.data, buf, bytes);
      op.synchronize("copy to the device");
    }
  });
}

void StagedCommunicator::do_barrier(const BarrierOptions& o) {
  Op op(*this, "barrier", 0, o.timeout);
  op.run([&] {
    BarrierOptions h = o;
    h.timeout = op.left();
    barrier(host_, h);
  });
}

}  // namespace hpct::comm
