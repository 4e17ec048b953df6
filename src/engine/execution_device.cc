// The engine's execution for device tensors (device.h has the protocol):
// readiness events waited on the device's communication stream, the fused
// group packed in the device's fusion buffer and reduced there by the
// stream collectives (NCCL), or staged through pinned host memory and the
// host communicator; a completion event recorded for the handles.
#include <algorithm>
#include <cstring>
#include <mutex>

#include "comm/reduce.h"
#include "engine/compression.h"
#include "engine/controller.h"
#include "engine/engine.h"
#include "engine/handle_state.h"
#include "engine/timeline.h"

namespace hpct::engine {
namespace {

std::size_t tensor_bytes(const Request& r) { return r.count() * comm::dtype_size(r.dtype); }

}  // namespace

Device* Engine::device_of(const std::vector<Entry*>& es) const {
  Device* d = nullptr;
  for (const Entry* e : es) {
    if (e->tensor.device == nullptr || e->tensor.device == d) continue;
    if (d != nullptr) {
      throw_invalid_argument("tensors '" + es.front()->req.name + "' and '" + e->req.name +
                             "' were fused on rank " + std::to_string(rank_) + " but lie on " + d->str() +
                             " and " + e->tensor.device->str() +
                             "; one rank's engine moves the tensors of one device");
    }
    d = e->tensor.device;
  }
  return d;
}

Engine::DeviceSlots& Engine::slots(Device& d) {
  auto& s = device_slots_[&d];
  if (!s) s = std::make_unique<DeviceSlots>(d);
  return *s;
}

void Engine::release_retired(bool all) {
  if (all) {
    // The engine is ending: give the device its bounded time, then let go.
    for (auto& [event, keepalive] : retired_) event->synchronize(comm_.default_timeout());
    retired_.clear();
    return;
  }
  retired_.erase(std::remove_if(retired_.begin(), retired_.end(), [](const auto& r) { return r.first->query(); }),
                 retired_.end());
}

namespace {

// The names of a group, for errors: "'a', 'b' and 3 more".
template <typename E>
std::string group_names(const std::vector<E*>& es) {
  std::string s;
  for (std::size_t i = 0; i < es.size() && i < 3; ++i) s += (i ? ", '" : "'") + es[i]->req.name + "'";
  if (es.size() > 3) s += " and " + std::to_string(es.size() - 3) + " more";
  return s;
}

// Blocks the engine's thread until the communication stream's work is done
// (the staged path, before the host reads staged bytes): bounded by the
// communicator's timeout; Timeout naming the tensors otherwise (the stream
// stays blocked, typically on a readiness event that never fired).
template <typename E>
void sync_stream(Device& d, Millis timeout, const std::vector<E*>& es, int rank) {
  if (d.synchronize(d.comm_stream(), timeout)) return;
  throw_timeout("tensor " + group_names(es) + " on rank " + std::to_string(rank) + ": " + d.str() +
                "'s communication stream did not finish within " + std::to_string(timeout.count()) +
                " ms (was the tensor's readiness event ever recorded after its producer?)");
}

// Memory of at least `bytes` in b; when b must grow, the stream is drained
// first, since enqueued work may still use the old memory.
template <typename E>
void* reserve_drained(DeviceBuffer& b, std::size_t bytes, Device& d, Millis timeout, const std::vector<E*>& es,
              int rank) {
  if (bytes > b.capacity()) sync_stream(d, timeout, es, rank);
  return b.reserve(bytes);
}

// Steps 2-4 of a group's allreduce on the communication stream: every
// member packed into the device fusion buffer (cast to 16 bits when
// compressed), the collective enqueued by the stream collectives, the
// members unpacked (cast back, times scale). Returns at once.
template <typename E>
void allreduce_on_stream(StreamCollectives& sc, char* buf, Device& d, Stream cs, const std::vector<E*>& es,
                         comm::DataType wire, comm::ReduceOp wire_op, bool compressed, float scale) {
  const std::size_t wire_size = comm::dtype_size(wire);
  std::size_t off = 0;
  for (E* e : es) {
    const std::size_t n = e->req.count();
    if (compressed) {
      d.cast_to_16_async(static_cast<const float*>(e->tensor.data),
                         reinterpret_cast<std::uint16_t*>(buf + off * wire_size), n, wire, cs);
    } else {
      d.copy_async(buf + off * wire_size, e->tensor.data, n * wire_size, cs);
    }
    off += n;
  }
  sc.allreduce(buf, off, wire, wire_op, cs);
  off = 0;
  for (E* e : es) {
    const std::size_t n = e->req.count();
    if (compressed) {
      d.cast_from_16_async(reinterpret_cast<const std::uint16_t*>(buf + off * wire_size),
                           static_cast<float*>(e->tensor.data), n, wire, scale, cs);
    } else {
      d.copy_async(e->tensor.data, buf + off * wire_size, n * wire_size, cs);
    }
    off += n;
  }
}

}  // namespace

void Engine::execute_allreduce_device(const Response& r, std::vector<Entry*>& es, Device& d,
                                      Compression compression) {
  release_retired(false);
  const Millis timeout = comm_.default_timeout();
  const Stream cs = d.comm_stream();
  const bool compressed = compression != Compression::kNone && r.dtype == comm::DataType::kFloat32;
  const comm::DataType wire = compressed ? wire_dtype(compression) : r.dtype;
  const std::size_t wire_size = comm::dtype_size(wire);
  std::size_t total = 0;
  bool all_on_device = true;
  for (Entry* e : es) {
    total += e->req.count();
    all_on_device = all_on_device && e->tensor.device == &d;
  }
  DeviceSlots& m = slots(d);
  const auto t_fuse = SteadyClock::now();
  // 1. Readiness: the stream waits for every producer; the host does not.
  for (Entry* e : es) {
    if (e->tensor.device == &d && e->tensor.ready) d.wait(cs, *e->tensor.ready);
  }
  const bool on_stream = options_.stream_collectives && options_.stream_collectives->serves(d) &&
                         all_on_device && (!compressed || d.can_cast());
  const comm::ReduceOp wire_op = compressed && r.op == comm::ReduceOp::kAvg ? comm::ReduceOp::kSum : r.op;
  const float scale = compressed && r.op == comm::ReduceOp::kAvg ? 1.0f / static_cast<float>(size_) : 1.0f;
  std::size_t packed = 0;
  if (on_stream) {
    // 2-4 on the device: pack (casting when compressed), the collective
    // enqueued on the same stream, unpack.
    char* buf = static_cast<char*>(reserve_drained(m.fusion, total * wire_size, d, timeout, es, rank_));
    allreduce_on_stream(*options_.stream_collectives, buf, d, cs, es, wire, wire_op, compressed, scale);
    packed = total * wire_size;
  } else {
    // Staged: the group's own bytes gathered straight into pinned host
    // memory (one copy per tensor; a device fusion buffer would add one),
    // the stream drained, the host collective (casting on the host when
    // compressed), and the copies back enqueued.
    const std::size_t elem = comm::dtype_size(r.dtype);
    bool has_host = false;
    for (Entry* e : es) has_host = has_host || e->tensor.device != &d;
    // Host tensors are copied on this thread: the previous group's copies
    // out of the staging memory must be done first.
    if (has_host) sync_stream(d, timeout, es, rank_);
    char* host = static_cast<char*>(reserve_drained(m.staging, total * elem, d, timeout, es, rank_));
    std::size_t off = 0;
    for (Entry* e : es) {
      const std::size_t bytes = tensor_bytes(e->req);
      if (e->tensor.device == &d) {
        d.copy_async(host + off, e->tensor.data, bytes, cs);
      } else if (bytes > 0) {
        std::memcpy(host + off, e->tensor.data, bytes);
      }
      off += bytes;
    }
    sync_stream(d, timeout, es, rank_);
    comm::AllreduceOptions o;
    o.count = total;
    o.dtype = wire;
    o.op = wire_op;
    if (compressed) {
      char* w = static_cast<char*>(fusion_.reserve(total * wire_size));
      compress(reinterpret_cast<const float*>(host), w, total, compression);
      o.output = w;
      comm::allreduce(comm_, o);
      decompress(w, reinterpret_cast<float*>(host), total, compression, scale);
    } else {
      o.output = host;
      comm::allreduce(comm_, o);
    }
    off = 0;
    for (Entry* e : es) {
      const std::size_t bytes = tensor_bytes(e->req);
      if (e->tensor.device == &d) {
        d.copy_async(e->tensor.data, host + off, bytes, cs);
      } else if (bytes > 0) {
        std::memcpy(e->tensor.data, host + off, bytes);
      }
      off += bytes;
    }
    packed = total * elem;
  }
  // 5. Completion: one event for the group.
  auto done = d.record(cs);
  for (Entry* e : es) {
    if (e->tensor.device == &d) e->completion = done;
  }
  {
    std::lock_guard<std::mutex> lk(mu_);
    stats_.packed_bytes += packed;
    stats_.allreduce_tensor_bytes += total * comm::dtype_size(r.dtype);
    stats_.allreduce_wire_bytes += total * wire_size;
    if (compressed) ++stats_.compressed_collectives;
  }
  if (timeline_) {
    const auto t_end = SteadyClock::now();
    const std::string args = "\"fused_tensors\":" + std::to_string(es.size()) +
                             ",\"bytes\":" + std::to_string(total * wire_size) + ",\"device\":\"" + d.str() +
                             "\",\"on_stream\":" + (on_stream ? "true" : "false");
    for (Entry* e : es) timeline_->phase(e->req.name, "communicated", t_fuse, t_end, args);
  }
}

void Engine::execute_broadcast_device(const Response& r, Entry& e, Device& d) {
  release_retired(false);
  const Millis timeout = comm_.default_timeout();
  const Stream cs = d.comm_stream();
  const std::vector<Entry*> one{&e};
  const std::size_t bytes = tensor_bytes(e.req);
  // Every rank waits for its producer: a late write must not land after the result.
  if (e.tensor.ready) d.wait(cs, *e.tensor.ready);
  if (options_.stream_collectives && options_.stream_collectives->serves(d)) {
    options_.stream_collectives->broadcast(e.tensor.data, e.req.count(), e.req.dtype, r.root, cs);
  } else {
    char* host = static_cast<char*>(reserve_drained(slots(d).staging, bytes, d, timeout, one, rank_));
    if (rank_ == r.root) d.copy_async(host, e.tensor.data, bytes, cs);
    sync_stream(d, timeout, one, rank_);
    comm::BroadcastOptions o;
    o.buffer = host;
    o.count = e.req.count();
    o.dtype = e.req.dtype;
    o.root = r.root;
    comm::broadcast(comm_, o);
    if (rank_ != r.root) d.copy_async(e.tensor.data, host, bytes, cs);
  }
  e.completion = d.record(cs);
}

void Engine::execute_allgather_device(const Response& r, Entry& e, Device& d) {
  release_retired(false);
  const Millis timeout = comm_.default_timeout();
  const Stream cs = d.comm_stream();
  const std::vector<Entry*> one{&e};
  std::size_t row = comm::dtype_size(e.req.dtype);
  for (std::size_t k = 1; k < e.req.shape.size(); ++k) row *= static_cast<std::size_t>(e.req.shape[k]);
  std::vector<std::int64_t> out_shape = e.req.shape;
  out_shape[0] = 0;
  std::vector<std::size_t> counts;
  std::size_t total = 0;
  for (auto fd : r.first_dims) {
    out_shape[0] += fd;
    counts.push_back(static_cast<std::size_t>(fd) * row);
    total += counts.back();
  }
  if (e.tensor.ready) d.wait(cs, *e.tensor.ready);
  // With an allocator the result goes to the device (memory of d, as the
  // input); without, into the handle (host bytes).
  void* out = nullptr;
  if (e.allocate) {
    out = e.allocate(out_shape);
  } else {
    e.state->gathered.resize(total);
    e.state->gathered_shape = out_shape;
  }
  if (e.allocate && options_.stream_collectives && options_.stream_collectives->serves(d)) {
    options_.stream_collectives->allgatherv(e.tensor.data, out, counts, cs);
  } else {
    DeviceSlots& m = slots(d);
    const std::size_t mine = tensor_bytes(e.req);
    char* in = static_cast<char*>(reserve_drained(m.staging, mine, d, timeout, one, rank_));
    char* res = e.allocate ? static_cast<char*>(reserve_drained(m.gathered, total, d, timeout, one, rank_))
                           : reinterpret_cast<char*>(e.state->gathered.data());
    d.copy_async(in, e.tensor.data, mine, cs);
    sync_stream(d, timeout, one, rank_);
    comm::AllgathervOptions o;
    o.input = in;
    o.output = res;
    o.counts = counts;
    o.dtype = comm::DataType::kUInt8;
    comm::allgatherv(comm_, o);
    if (e.allocate) d.copy_async(out, res, total, cs);
  }
  e.completion = d.record(cs);
}

}  // namespace hpct::engine
