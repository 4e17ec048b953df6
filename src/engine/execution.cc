// The engine's execution of negotiated responses: broadcast, allgather and
// the fused allreduce (adjacent tensors as they lie, scattered ones in place
// by segments or through the fusion buffer, compressed or not), then the
// handles completed.
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

std::size_t byte_count(const Request& r) { return r.count() * comm::dtype_size(r.dtype); }

}  // namespace

void Engine::execute(const Response& r, bool from_full) {
  if (r.type == Response::Type::kError) {
    for (const auto& name : r.names) {
      if (Entry* e = find(name)) complete(*e, make_error(r.error_code, r.error));
    }
    return;
  }
  std::vector<Entry*> es;
  for (const auto& name : r.names) {
    Entry* e = find(name);
    // The coordinator announces only names every rank holds.
    if (e == nullptr) {
      throw Error(ErrorCode::kMismatch, "engine protocol error: rank " + std::to_string(rank_) +
                                            " was told to communicate tensor '" + name +
                                            "' that it does not hold");
    }
    es.push_back(e);
  }
  execute_entries(r, es, from_full);
}

// The cached phase's ready entries, in cache-index order (the same on every
// rank). The steady state of training: every tensor has the same dtype, op
// and compression and they fit the fusion threshold, so they are one
// response, executed without looking any name up. Otherwise the plan of
// plan_cached(), by name.
void Engine::execute_cached(std::vector<Entry*>& es) {
  const Request& first = es.front()->req;
  std::size_t bytes = 0;
  bool one_group = first.kind == CollectiveKind::kAllreduce || first.kind == CollectiveKind::kReduceScatter;
  for (const Entry* e : es) {
    const Request& q = e->req;
    one_group = one_group && q.kind == first.kind && q.dtype == first.dtype &&
                q.op == first.op && q.compression == first.compression;
    bytes += q.count() * wire_element_size(q);
  }
  if (one_group && bytes <= controller_->fusion_bytes()) {
    Response r;
    r.type = first.kind == CollectiveKind::kAllreduce ? Response::Type::kAllreduce : Response::Type::kReduceScatter;
    r.dtype = first.dtype;
    r.op = first.op;
    r.compression = first.compression;
    execute_entries(r, es, false);
    return;
  }
  std::vector<std::size_t> ready;
  ready.reserve(es.size());
  for (const Entry* e : es) ready.push_back(*controller_->cache().lookup(e->req));
  for (const auto& r : controller_->plan_cached(ready)) execute(r, false);
}

void Engine::execute_entries(const Response& r, std::vector<Entry*>& es, bool from_full) {
  const auto ready = SteadyClock::now();
  flight_mark(es, FlightState::kNegotiated, ready);
  if (timeline_) {
    for (Entry* e : es) {
      timeline_->phase(e->req.name, "queued", e->submitted, e->reported);
      timeline_->phase(e->req.name, "negotiated", e->reported, ready);
    }
  }
  // allreduce: its own; reduce-scatter: host tensors only (reduce_scatter_async)
  const bool reduces = r.type == Response::Type::kAllreduce || r.type == Response::Type::kReduceScatter;
  Device* device = reduces ? nullptr : device_of(es);
  if (device != nullptr) flight_mark(es, FlightState::kStarted, ready, FlightPath::kDevice);
  if (r.type == Response::Type::kAllreduce) {
    execute_allreduce(r, es);
  } else if (r.type == Response::Type::kReduceScatter) {
    execute_reduce_scatter(r, es);
  } else if (device != nullptr && r.type == Response::Type::kBroadcast) {
    execute_broadcast_device(r, *es[0], *device);
  } else if (device != nullptr) {
    execute_allgather_device(r, *es[0], *device);
  } else if (r.type == Response::Type::kBroadcast) {
    Entry& e = *es[0];
    auto t0 = SteadyClock::now();
    flight_mark(es, FlightState::kStarted, t0, FlightPath::kBroadcast);
    comm::BroadcastOptions o;
    o.buffer = e.tensor.data;
    o.count = e.req.count();
    o.dtype = e.req.dtype;
    o.root = r.root;
    comm::broadcast(comm_, o);
    if (timeline_) timeline_->phase(e.req.name, "communicated", t0, SteadyClock::now());
  } else {
    Entry& e = *es[0];
    std::size_t row = comm::dtype_size(e.req.dtype);
    for (size_t d = 1; d < e.req.shape.size(); ++d) row *= static_cast<size_t>(e.req.shape[d]);
    std::vector<std::int64_t> out_shape = e.req.shape;
    out_shape[0] = 0;
    comm::AllgathervOptions o;
    for (auto fd : r.first_dims) {
      out_shape[0] += fd;
      o.counts.push_back(static_cast<size_t>(fd) * row);  // as bytes
    }
    void* out = nullptr;
    if (e.allocate) {
      out = e.allocate(out_shape);
    } else {
      std::size_t total = 0;
      for (auto c : o.counts) total += c;
      e.state->gathered.resize(total);
      e.state->gathered_shape = out_shape;
      out = e.state->gathered.data();
    }
    auto t0 = SteadyClock::now();
    flight_mark(es, FlightState::kStarted, t0, FlightPath::kAllgather);
    o.input = e.tensor.data;
    o.output = out;
    o.dtype = comm::DataType::kUInt8;
    comm::allgatherv(comm_, o);
    if (timeline_) timeline_->phase(e.req.name, "communicated", t0, SteadyClock::now());
  }
  {
    std::lock_guard<std::mutex> lk(mu_);
    ++stats_.collectives;
  }
  if (from_full && r.type != Response::Type::kAllgather) {
    for (Entry* e : es) controller_->cache().insert(e->req);
  }
  straggler_.meter()->add_comm(std::chrono::duration<double>(SteadyClock::now() - ready).count());
  complete_all(es, nullptr);
}

// Ends each entry's operation with `error` (nullptr: success). Every handle
// is marked done before the first waiter is woken: a caller waiting on them
// in turn wakes once.
void Engine::complete_all(const std::vector<Entry*>& es, std::exception_ptr error) {
  flight_mark(es, error ? FlightState::kFailed : FlightState::kDone, SteadyClock::now());
  if (error && flight_.enabled()) note_flight_error(error);
  std::vector<std::shared_ptr<Handle::State>> states;
  states.reserve(es.size());
  {
    std::lock_guard<std::mutex> lk(mu_);
    for (Entry* e : es) {
      auto node = held_.extract(e->req.name);
      if (!node.empty() && held_spare_.size() < kSpareNodes) held_spare_.push_back(std::move(node));
    }
  }
  for (Entry* e : es) {
    states.push_back(e->state);
    if (e->completion) {
      // A device tensor: the device may still write it, so its keepalive
      // goes when the completion event fired, and the handle orders its
      // consumer on that event.
      if (!error) {
        std::lock_guard<std::mutex> lk(e->state->mu);
        e->state->completion = e->completion;
      }
      if (e->tensor.keepalive) retired_.emplace_back(e->completion, std::move(e->tensor.keepalive));
      e->completion.reset();
    }
    erase(e->req.name);  // drops the keepalive; e is gone
  }
  for (auto& state : states) {
    std::lock_guard<std::mutex> lk(state->mu);
    state->done = true;
    state->error = error;
  }
  for (auto& state : states) state->cv.notify_all();
}

Compression Engine::allreduce_compression(const Response& r, std::size_t total) {
  Compression compression = r.compression;
  if (compression == Compression::kAuto && r.dtype == comm::DataType::kFloat32) {
    // Every rank executes the same responses in the same order, so every
    // rank reaches the same (collective) probe here.
    const std::size_t known = auto_compression_.decisions().size();
    compression = auto_compression_.choose(total);
    if (auto_compression_.decisions().size() != known) {
      const auto& [cls, d] = auto_compression_.decisions().back();
      logger_.info("engine", std::string("compression auto: ") + compression_name(d.choice) +
                                 " for allreduces of 2^" + std::to_string(cls) + " bytes and up (" +
                                 d.reason + ": float32 " + std::to_string(d.none_ms) +
                                 " ms, float16 " + std::to_string(d.fp16_ms) + " ms)");
      std::lock_guard<std::mutex> lk(mu_);
      auto_decisions_ = auto_compression_.decisions();
    }
  } else if (compression == Compression::kAuto) {
    compression = Compression::kNone;
  }
  return compression;
}

bool Engine::allreduce_segments(const Response& r, std::vector<Entry*>& es, std::size_t total,
                                std::size_t wire_size, SteadyClock::time_point t_fuse) {
  comm::AllreduceSegmentsOptions so;
  so.dtype = r.dtype;
  so.op = r.op;
  so.segments.reserve(es.size());
  for (Entry* e : es) so.segments.push_back({e->tensor.data, e->req.count()});
  flight_mark(es, FlightState::kStarted, t_fuse, FlightPath::kSegments);
  if (comm::try_allreduce_segments(comm_, so)) {
    const auto t_done = SteadyClock::now();
    {
      std::lock_guard<std::mutex> lk(mu_);
      stats_.in_place_bytes += total * wire_size;
      stats_.allreduce_tensor_bytes += total * comm::dtype_size(r.dtype);
      stats_.allreduce_wire_bytes += total * wire_size;
    }
    if (timeline_) {
      const std::string args = "\"fused_tensors\":" + std::to_string(es.size()) +
                               ",\"bytes\":" + std::to_string(total * wire_size) +
                               ",\"in_place\":true,\"segments\":true";
      for (Entry* e : es) {
        timeline_->phase(e->req.name, "fused", t_fuse, t_fuse, args);
        timeline_->phase(e->req.name, "communicated", t_fuse, t_done, args);
        timeline_->phase(e->req.name, "done", t_done, SteadyClock::now());
      }
    }
    return true;
  }
  return false;
}

void Engine::execute_allreduce(const Response& r, std::vector<Entry*>& es) {
  std::size_t total = 0;
  for (Entry* e : es) total += e->req.count();
  const Compression compression = allreduce_compression(r, total);  // collective: before any branch
  if (Device* d = device_of(es)) {
    flight_mark(es, FlightState::kStarted, SteadyClock::now(), FlightPath::kDevice);
    execute_allreduce_device(r, es, *d, compression);
    return;
  }
  const bool compressed = compression != Compression::kNone && r.dtype == comm::DataType::kFloat32;
  const comm::DataType wire = compressed ? wire_dtype(compression) : r.dtype;
  const std::size_t wire_size = comm::dtype_size(wire);

  // Adjacent in memory, in the announced order: send the span as it is.
  bool adjacent = !compressed;
  for (size_t i = 0; adjacent && i + 1 < es.size(); ++i) {
    auto* end = static_cast<char*>(es[i]->tensor.data) + byte_count(es[i]->req);
    adjacent = end == static_cast<char*>(es[i + 1]->tensor.data);
  }
  auto t_fuse = SteadyClock::now();
  // Scattered tensors: when the communicator reduces segments in place (the
  // shared-memory path), they go as they are, without the fusion buffer.
  if (!adjacent && !compressed && allreduce_segments(r, es, total, wire_size, t_fuse)) return;
  comm::AllreduceOptions o;
  o.count = total;
  o.dtype = wire;
  o.op = r.op;
  if (adjacent) {
    o.output = es[0]->tensor.data;
  } else {
    char* buf = static_cast<char*>(fusion_.reserve(total * wire_size));
    std::size_t off = 0;
    for (Entry* e : es) {
      std::size_t n = e->req.count();
      if (compressed) {
        compress(static_cast<const float*>(e->tensor.data), buf + off * wire_size, n, compression);
      } else if (n > 0) {
        std::memcpy(buf + off * wire_size, e->tensor.data, n * wire_size);
      }
      off += n;
    }
    o.output = buf;
    // Compressed averages are summed on the wire and divided in the cast back.
    if (compressed && r.op == comm::ReduceOp::kAvg) o.op = comm::ReduceOp::kSum;
  }
  auto t_comm = SteadyClock::now();
  flight_mark(es, FlightState::kStarted, t_comm,
              adjacent ? FlightPath::kInPlace : compressed ? FlightPath::kCompressed : FlightPath::kPacked);
  comm::allreduce(comm_, o);
  auto t_done = SteadyClock::now();
  if (!adjacent) {
    const char* buf = static_cast<const char*>(o.output);
    float scale = compressed && r.op == comm::ReduceOp::kAvg ? 1.0f / static_cast<float>(size_) : 1.0f;
    std::size_t off = 0;
    for (Entry* e : es) {
      std::size_t n = e->req.count();
      if (compressed) {
        decompress(buf + off * wire_size, static_cast<float*>(e->tensor.data), n, compression, scale);
      } else if (n > 0) {
        std::memcpy(e->tensor.data, buf + off * wire_size, n * wire_size);
      }
      off += n;
    }
  }
  {
    std::lock_guard<std::mutex> lk(mu_);
    (adjacent ? stats_.in_place_bytes : stats_.packed_bytes) += total * wire_size;
    stats_.allreduce_tensor_bytes += total * comm::dtype_size(r.dtype);
    stats_.allreduce_wire_bytes += total * wire_size;
    if (compressed) ++stats_.compressed_collectives;
  }
  if (timeline_) {
    auto t_end = SteadyClock::now();
    std::string args = "\"fused_tensors\":" + std::to_string(es.size()) +
                       ",\"bytes\":" + std::to_string(total * wire_size) +
                       ",\"in_place\":" + (adjacent ? "true" : "false");
    for (Entry* e : es) {
      timeline_->phase(e->req.name, "fused", t_fuse, t_comm, args);
      timeline_->phase(e->req.name, "communicated", t_comm, t_done, args);
      timeline_->phase(e->req.name, "done", t_done, t_end);
    }
  }
}

void Engine::complete(Entry& e, std::exception_ptr error) { complete_all({&e}, error); }

// An operation failed: the record keeps the error, and is written (a stall,
// a mismatch or a lost peer is what the record is for).
void Engine::note_flight_error(std::exception_ptr error) {
  std::string what = "unknown error";
  try {
    std::rethrow_exception(error);
  } catch (const std::exception& x) {
    what = x.what();
  } catch (...) {
  }
  flight_.note_error(what);
  if (flight_dump_) flight_dump_->request("error: " + what);
}

void Engine::fail_all(std::exception_ptr error) {
  while (!pending_.empty()) {
    Entry& e = pending_.begin()->second;
    std::exception_ptr err = error;
    try {
      std::rethrow_exception(error);
    } catch (const Error& x) {
      err = make_error(x.code(), std::string(kind_name(e.req.kind)) + " of tensor '" + e.req.name +
                                     "' failed on rank " + std::to_string(rank_) + ": " + x.what());
    } catch (...) {
    }
    complete(e, err);
  }
}

}  // namespace hpct::engine
