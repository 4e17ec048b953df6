// The Gloo backend's direct path: allreduces over hpctrain's own TCP
// connections (comm/direct_mesh.h, recursive doubling) instead of Gloo's
// ring, for every size with 2 ranks and up to direct_allreduce_bytes with more.
#include <cstring>

#include "comm/gloo/detail.h"

namespace hpct::comm {

using namespace gloo_detail;

void GlooCommunicator::connect_direct(const std::string& who) {
  DirectMeshOptions d;
  d.rank = rank_;
  d.size = size_;
  d.store = store_;
  d.ip = peers_[static_cast<size_t>(rank_)].ip;
  d.timeout = options_.timeout;
  direct_ = DirectMesh::connect(d);
  options_.logger.debug("comm", who + ": allreduces of up to " +
                                    std::to_string(options_.direct_allreduce_bytes) +
                                    " bytes go over direct connections");
}

void GlooCommunicator::direct_allreduce(const AllreduceOptions& o) {
  run(describe_op("allreduce", o.count, o.dtype), o.timeout, -1, [&] {
    if (o.count == 0) return;
    if (o.input != o.output) std::memmove(o.output, o.input, o.count * dtype_size(o.dtype));
    direct_->allreduce(o.output, o.count, o.dtype, o.op, Deadline(o.timeout));
  });
}

}  // namespace hpct::comm
