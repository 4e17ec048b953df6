// The engine's fused reduce-scatter (engine.h, reduce_scatter_async): the
// group's tensors are packed by owning rank, so rank p's ranges of every
// tensor form one contiguous block, and one reduce-scatter with per-rank
// counts sends each rank its block; each rank then copies its block back
// to the tensors' outputs. Averages and 16-bit wires as the allreduce's
// packed path: a compressed average is summed on the wire and scaled in
// the cast back; an uncompressed one is averaged by the communicator
// (sum in rank order, then one division).
#include <cstring>
#include <mutex>
#include <string>

#include "engine/compression.h"
#include "engine/controller.h"
#include "engine/engine.h"
#include "engine/timeline.h"

namespace hpct::engine {

void Engine::execute_reduce_scatter(const Response& r, std::vector<Entry*>& es) {
  const auto t_fuse = SteadyClock::now();
  std::size_t total = 0;
  std::vector<std::size_t> counts(static_cast<std::size_t>(size_), 0);
  for (Entry* e : es) {
    total += e->req.count();
    for (int p = 0; p < size_; ++p) counts[p] += static_cast<std::size_t>(e->req.split[p + 1] - e->req.split[p]);
  }
  const Compression compression = allreduce_compression(r, total);  // collective: as the allreduce's
  const bool compressed = compression != Compression::kNone && r.dtype == comm::DataType::kFloat32;
  const comm::DataType wire = compressed ? wire_dtype(compression) : r.dtype;
  const std::size_t ws = comm::dtype_size(wire);
  const std::size_t es_size = comm::dtype_size(r.dtype);
  const std::size_t mine = counts[static_cast<std::size_t>(rank_)];
  char* buf = static_cast<char*>(fusion_.reserve((total + mine) * ws));
  char* got = buf + total * ws;
  std::size_t off = 0;
  for (int p = 0; p < size_; ++p) {
    for (Entry* e : es) {
      const auto begin = static_cast<std::size_t>(e->req.split[p]);
      const std::size_t n = static_cast<std::size_t>(e->req.split[p + 1]) - begin;
      const char* src = static_cast<const char*>(e->tensor.data) + begin * es_size;
      if (compressed) {
        compress(reinterpret_cast<const float*>(src), buf + off * ws, n, compression);
      } else if (n > 0) {
        std::memcpy(buf + off * ws, src, n * ws);
      }
      off += n;
    }
  }
  comm::ReduceScatterOptions o;
  o.input = buf;
  o.output = got;
  o.counts = counts;
  o.dtype = wire;
  o.op = compressed && r.op == comm::ReduceOp::kAvg ? comm::ReduceOp::kSum : r.op;
  const auto t_comm = SteadyClock::now();
  flight_mark(es, FlightState::kStarted, t_comm, FlightPath::kReduceScatter);
  comm::reduce_scatter(comm_, o);
  const auto t_done = SteadyClock::now();
  const float scale = compressed && r.op == comm::ReduceOp::kAvg ? 1.0f / static_cast<float>(size_) : 1.0f;
  off = 0;
  for (Entry* e : es) {
    const std::size_t n = static_cast<std::size_t>(e->req.split[rank_ + 1] - e->req.split[rank_]);
    if (compressed) {
      decompress(got + off * ws, static_cast<float*>(e->out), n, compression, scale);
    } else if (n > 0) {
      std::memmove(e->out, got + off * ws, n * ws);
    }
    off += n;
  }
  {
    std::lock_guard<std::mutex> lk(mu_);
    stats_.packed_bytes += total * ws;
    stats_.reduce_scatter_tensor_bytes += total * es_size;
    stats_.reduce_scatter_sent_bytes += (total - mine) * ws;
    if (compressed) ++stats_.compressed_collectives;
  }
  if (timeline_) {
    const auto t_end = SteadyClock::now();
    const std::string args = "\"fused_tensors\":" + std::to_string(es.size()) +
                             ",\"bytes\":" + std::to_string(total * ws) + ",\"reduce_scatter\":true";
    for (Entry* e : es) {
      timeline_->phase(e->req.name, "fused", t_fuse, t_comm, args);
      timeline_->phase(e->req.name, "communicated", t_comm, t_done, args);
      timeline_->phase(e->req.name, "done", t_done, t_end);
    }
  }
}

}  // namespace hpct::engine
