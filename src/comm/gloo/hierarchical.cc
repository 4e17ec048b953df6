// The Gloo backend's hierarchical path (communicator.h describes the three
// steps): shared memory within each host, local rank l of every host over
// its own direct connections, shared memory again.
#include <algorithm>
#include <cstring>

#include "comm/gloo/detail.h"
#include "comm/reduce.h"
#include "comm/shm_allreduce.h"

namespace hpct::comm {

using namespace gloo_detail;

void GlooCommunicator::connect_hierarchy() {
  const std::int64_t mine = options_.host_identity != 0 ? options_.host_identity : host_identity();
  const std::vector<std::int64_t> ids = allgather_value(*this, mine);
  std::vector<std::int64_t> hosts;  // in order of first appearance
  std::vector<int> on_host;
  int local_rank = -1;
  for (int r = 0; r < size_; ++r) {
    auto it = std::find(hosts.begin(), hosts.end(), ids[r]);
    if (it == hosts.end()) {
      hosts.push_back(ids[r]);
      on_host.push_back(0);
      it = hosts.end() - 1;
    }
    const auto h = static_cast<size_t>(it - hosts.begin());
    if (r == rank_) local_rank = on_host[h];
    ++on_host[h];
  }
  const int host_count = static_cast<int>(hosts.size());
  const int local_size = on_host[0];
  const bool uniform =
      std::all_of(on_host.begin(), on_host.end(), [&](int n) { return n == local_size; });
  // Every rank saw the same ids, so every rank decides alike.
  if (host_count < 2 || local_size < 2 || !uniform) return;
  const int host_index =
      static_cast<int>(std::find(hosts.begin(), hosts.end(), mine) - hosts.begin());
  auto h = std::make_unique<Hierarchy>();
  h->local_rank = local_rank;
  h->local_size = local_size;
  for (int r = 0; r < size_; ++r) {
    if (ids[r] == mine) h->local_world_ranks.push_back(r);
  }
  std::string reason;
  h->host = connect_shm_group(*this, h->local_world_ranks, options_.shm_slot_bytes, &reason);
  if (!h->host) {
    options_.logger.warn("comm", "hierarchical allreduce is off, allreduces stay flat: " + reason);
    return;
  }
  DirectMeshOptions d;
  d.rank = host_index;
  d.size = host_count;
  d.store = store_;
  d.ip = peers_[rank_].ip;
  d.timeout = options_.timeout;
  d.key_prefix = "hpct/hier/across/" + std::to_string(local_rank) + "/";
  // Slices of 256 KiB and more cross 3 or more hosts by a ring: recursive
  // doubling would send the whole slice once per step and twice more for a
  // fold (3 hosts: 3 slices a host against the ring's 4/3).
  d.ring_from_bytes = kHierarchyRingFromBytes;
  for (int host = 0; host < host_count; ++host) {  // local rank l of each host, by world rank
    for (int r = 0, seen = 0; r < size_; ++r) {
      if (ids[r] == hosts[static_cast<size_t>(host)] && seen++ == local_rank)
        d.world_ranks.push_back(r);
    }
  }
  h->across = DirectMesh::connect(d);
  options_.logger.debug("comm", "hierarchical allreduce: " + std::to_string(host_count) +
                                    " hosts x " + std::to_string(local_size) +
                                    " ranks, local rank " + std::to_string(local_rank));
  hier_ = std::move(h);
}

void GlooCommunicator::hierarchical_allreduce(const AllreduceOptions& o) {
  run(describe_op("allreduce", o.count, o.dtype), o.timeout, -1, [&] {
    const size_t es = dtype_size(o.dtype);
    if (o.input != o.output) std::memmove(o.output, o.input, o.count * es);
    const Deadline d(o.timeout);
    auto* out = static_cast<std::uint8_t*>(o.output);
    const size_t l = static_cast<size_t>(hier_->local_rank);
    const size_t parts = static_cast<size_t>(hier_->local_size);
    const size_t begin = o.count * l / parts;
    const size_t end = o.count * (l + 1) / parts;
    // A failure within the host goes through the failure reports too (and
    // shuts this rank's connections, so other hosts' ranks fail at once),
    // naming the world rank whose process is gone when there is one.
    auto within_host = [&] {
      try {
        hier_->host->allreduce(nullptr, out, o.count, o.dtype, ReduceOp::kSum, d);
      } catch (const Error& e) {
        if (e.code() == ErrorCode::kInvalidArgument) throw;
        const int gone = hier_->host->gone_rank();
        fail(describe_op("allreduce", o.count, o.dtype), o.timeout,
             gone >= 0 ? hier_->local_world_ranks[static_cast<size_t>(gone)] : -1, e.code(),
             "within the host (local ranks 0.." + std::to_string(hier_->local_size - 1) +
                 " are world ranks " + rank_list(hier_->local_world_ranks) + "): " + e.what());
      }
    };
    within_host();
    hier_->across->allreduce(out + begin * es, end - begin, o.dtype, ReduceOp::kSum, d);
    std::memset(out, 0, begin * es);
    std::memset(out + end * es, 0, (o.count - end) * es);
    within_host();
    if (o.op == ReduceOp::kAvg) finish_average(o.output, o.count, o.dtype, size_);
  });
}

}  // namespace hpct::comm
