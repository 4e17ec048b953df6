#include "comm/gpu/hierarchical_communicator.h"

#include <algorithm>
#include <utility>

#include "comm/reduce.h"
#include "core/error.h"

namespace hpct::comm {
namespace {

const HierarchicalParts& checked(const HierarchicalParts& p) {
  if (!p.local || !p.across || !p.flat || !p.memory) {
    throw_invalid_argument(
        "hierarchical communicator: local, across, flat and memory are all needed");
  }
  if (!p.across->host_buffers()) {
    throw_invalid_argument(std::string("hierarchical communicator: the across-host part (") +
                           p.across->backend_name() + ") must take host buffers");
  }
  if (p.flat->size() != p.local->size() * p.across->size()) {
    throw_invalid_argument("hierarchical communicator: " + std::to_string(p.flat->size()) +
                           " ranks is not " + std::to_string(p.local->size()) + " per host x " +
                           std::to_string(p.across->size()) + " hosts");
  }
  return p;
}

}  // namespace

// One operation: its deadline, its name for messages, the latch check before
// and the latch after. Every step gets what is left of the timeout.
class HierarchicalDeviceCommunicator::Op {
 public:
  Op(HierarchicalDeviceCommunicator& c, size_t bytes, Millis timeout)
      : c_(c), deadline_(timeout) {
    what_ = "hierarchical allreduce of " + std::to_string(bytes) + " bytes on rank " +
            std::to_string(c.rank()) + " of " + std::to_string(c.size()) + " (local rank " +
            std::to_string(c.local_rank()) + " of " + std::to_string(c.local_size()) + " on host " +
            std::to_string(c.host_index()) + " of " + std::to_string(c.host_count()) + ", " +
            c.memory_->name() + ")";
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

  // Inside step(): the copies' wait, named with the step.
  void synchronize(const std::string& copy) {
    c_.memory_->synchronize(left(), what_ + ": " + step_ + ": " + copy);
  }

  // Runs one step; an hpct::Error from it breaks the communicator, named
  // with the operation and the step.
  template <typename Fn>
  void step(const std::string& name, Fn&& fn) {
    step_ = name;
    try {
      fn();
    } catch (const Error& e) {
      if (c_.latch_.failed()) throw;
      std::string m = e.what();
      if (m.rfind(what_, 0) != 0) m = what_ + ": " + name + ": " + m;
      if (e.code() == ErrorCode::kInvalidArgument) throw Error(e.code(), m);
      c_.latch_.fail(Error(e.code(), m));
    }
  }

 private:
  HierarchicalDeviceCommunicator& c_;
  Deadline deadline_;
  std::string what_;
  std::string step_;
};

HierarchicalDeviceCommunicator::HierarchicalDeviceCommunicator(HierarchicalParts parts)
    // The arguments are evaluated in any order: each one checks.
    : Communicator(checked(parts).flat->default_timeout(), checked(parts).flat->rank(),
                   checked(parts).flat->size()),
      local_(std::move(parts.local)),
      across_(std::move(parts.across)),
      flat_(std::move(parts.flat)),
      memory_(std::move(parts.memory)),
      flat_up_to_bytes_(parts.flat_up_to_bytes),
      local_world_ranks_(std::move(parts.local_world_ranks)),
      name_(std::string("hierarchical-") + local_->backend_name() + "-" + across_->backend_name()) {
}

HierarchicalDeviceCommunicator::~HierarchicalDeviceCommunicator() {
  // After a failure a copy may still be running into the buffer: leak it.
  if (!latch_.failed()) memory_->free_pinned(staging_);
}

bool HierarchicalDeviceCommunicator::takes_hierarchy(size_t bytes, DataType dtype) const {
  return bytes > flat_up_to_bytes_ && dtype != DataType::kInt16;
}

std::string HierarchicalDeviceCommunicator::algorithm(OpKind op, size_t bytes) const {
  // algorithm() knows no dtype: int16, which goes flat, is the exception.
  if (op == OpKind::kAllreduce && takes_hierarchy(bytes, DataType::kFloat32)) {
    return std::string("hier:") + local_->backend_name() + "+" + across_->backend_name() + "+" +
           local_->backend_name();
  }
  return flat_->algorithm(op, bytes);
}

char* HierarchicalDeviceCommunicator::staging(size_t bytes) {
  if (bytes <= capacity_) return staging_;
  const size_t grown = std::max(bytes, capacity_ * 2);
  void* fresh = memory_->alloc_pinned(grown);
  memory_->free_pinned(staging_);
  staging_ = static_cast<char*>(fresh);
  capacity_ = grown;
  ++allocations_;
  return staging_;
}

// Every other operation takes the flat part. A failure there breaks this
// communicator too: the ranks' parts no longer agree on what ran.
template <typename Fn>
void HierarchicalDeviceCommunicator::flat_op(Fn&& fn) {
  latch_.throw_if_failed();
  try {
    fn();
  } catch (const Error& e) {
    if (e.code() == ErrorCode::kInvalidArgument || latch_.failed()) throw;
    latch_.fail(e);
  }
}

void HierarchicalDeviceCommunicator::do_allreduce(const AllreduceOptions& o) {
  const size_t bytes = o.count * dtype_size(o.dtype);
  if (bytes == 0) return;  // every rank passes the same count
  if (!takes_hierarchy(bytes, o.dtype)) {
    flat_op([&] { allreduce(*flat_, o); });
    return;
  }
  hierarchical_allreduce(o);
}

void HierarchicalDeviceCommunicator::hierarchical_allreduce(const AllreduceOptions& o) {
  const size_t es = dtype_size(o.dtype);
  const size_t parts = static_cast<size_t>(local_size());
  const size_t l = static_cast<size_t>(local_rank());
  const size_t block = o.count / parts;  // b
  const size_t even = block * parts;     // L*b
  const size_t tail = o.count - even;    // t
  const bool last = l + 1 == parts;
  const size_t begin = l * block;  // this rank's slice across hosts
  const size_t mine = block + (last ? tail : 0);
  // Sum and avg are summed through steps 1-2 and averaged once, in step 2.
  const ReduceOp inner = o.op == ReduceOp::kAvg ? ReduceOp::kSum : o.op;
  auto* out = static_cast<char*>(o.output);
  const auto* in = static_cast<const char*>(o.input != nullptr ? o.input : o.output);

  Op op(*this, o.count * es, o.timeout);
  if (block > 0) {
    op.step("within the host (reduce-scatter of " + std::to_string(even) + " elements)", [&] {
      ReduceScatterOptions r;
      r.input = in;
      r.output = out + begin * es;  // in place: slice l of the output
      r.count = block;
      r.dtype = o.dtype;
      r.op = inner;
      r.tag = o.tag;
      r.timeout = op.left();
      reduce_scatter(*local_, r);  // out of place too: straight into the output's slice
    });
  }
  if (tail > 0) {
    op.step("within the host (allreduce of the last " + std::to_string(tail) + " elements)", [&] {
      AllreduceOptions a;
      a.input = in + even * es;
      a.output = out + even * es;
      a.count = tail;
      a.dtype = o.dtype;
      a.op = inner;
      a.tag = o.tag;
      a.timeout = op.left();
      allreduce(*local_, a);
    });
  }
  if (mine > 0) {
    const std::string slice =
        "elements " + std::to_string(begin) + ".." + std::to_string(begin + mine - 1);
    op.step("across hosts (" + slice + ")", [&] {
      char* buf = staging(mine * es);
      memory_->copy_to_host(buf, out + begin * es, mine * es);
      op.synchronize("copy to the host");
      AllreduceOptions a;
      a.input = buf;
      a.output = buf;
      a.count = mine;
      a.dtype = o.dtype;
      a.op = inner;
      a.tag = o.tag;
      a.timeout = op.left();
      allreduce(*across_, a);
      if (o.op == ReduceOp::kAvg) finish_average(buf, mine, o.dtype, size_);
      memory_->copy_to_device(out + begin * es, buf, mine * es);
      op.synchronize("copy to the device");
    });
  }
  op.step("within the host (allgather of the slices)", [&] {
    AllgathervOptions g;
    g.input = out + begin * es;  // in place: this rank's slice of the output
    g.output = out;
    g.counts.assign(parts, block);
    g.counts.back() += tail;
    g.dtype = o.dtype;
    g.tag = o.tag;
    g.timeout = op.left();
    allgatherv(*local_, g);
  });
}

void HierarchicalDeviceCommunicator::do_broadcast(const BroadcastOptions& o) {
  flat_op([&] { broadcast(*flat_, o); });
}

void HierarchicalDeviceCommunicator::do_allgatherv(const AllgathervOptions& o) {
  flat_op([&] { allgatherv(*flat_, o); });
}

void HierarchicalDeviceCommunicator::do_reduce_scatter(const ReduceScatterOptions& o) {
  flat_op([&] { reduce_scatter(*flat_, o); });
}

void HierarchicalDeviceCommunicator::do_reduce_scatter_v(const ReduceScatterOptions& o) {
  flat_op([&] { reduce_scatter(*flat_, o); });
}

void HierarchicalDeviceCommunicator::do_send(const SendOptions& o) {
  flat_op([&] { send(*flat_, o); });
}

void HierarchicalDeviceCommunicator::do_recv(const RecvOptions& o) {
  flat_op([&] { recv(*flat_, o); });
}

void HierarchicalDeviceCommunicator::do_alltoall(const AlltoallOptions& o) {
  flat_op([&] { alltoall(*flat_, o); });
}

void HierarchicalDeviceCommunicator::do_barrier(const BarrierOptions& o) {
  flat_op([&] { barrier(*flat_, o); });
}

}  // namespace hpct::comm
