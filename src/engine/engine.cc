#include "engine/engine.h"

#include <algorithm>
#include <cstring>
#include <optional>

#include "comm/reduce.h"
#include "engine/compression.h"
#include "engine/controller.h"
#include "engine/timeline.h"

namespace hpct::engine {

struct Handle::State {
  std::string name;
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;                  // GUARDED_BY(mu)
  std::exception_ptr error;           // GUARDED_BY(mu)
  std::vector<std::uint8_t> gathered;  // written before done, read after
  std::vector<std::int64_t> gathered_shape;
  // Valid while !done: the engine completes every handle before it goes.
  Engine* engine = nullptr;
};

namespace {

std::size_t byte_count(const Request& r) { return r.count() * comm::dtype_size(r.dtype); }

std::exception_ptr make_error(ErrorCode code, const std::string& message) {
  return std::make_exception_ptr(Error(code, message));
}

}  // namespace

// ---- Handle ----

bool Handle::poll() const {
  std::lock_guard<std::mutex> lk(state_->mu);
  return state_->done;
}

void Handle::wait() const {
  if (!poll()) state_->engine->run_rounds_for(*state_);
  std::unique_lock<std::mutex> lk(state_->mu);
  if (!state_->done) state_->engine->flush();
  state_->cv.wait(lk, [&] { return state_->done; });
  if (state_->error) std::rethrow_exception(state_->error);
}

void Handle::wait(Millis timeout) const {
  std::unique_lock<std::mutex> lk(state_->mu);
  if (!state_->done) state_->engine->flush();
  if (!state_->cv.wait_for(lk, timeout, [&] { return state_->done; })) {
    throw_timeout("tensor '" + state_->name + "' was not done within " +
                  std::to_string(timeout.count()) + " ms");
  }
  if (state_->error) std::rethrow_exception(state_->error);
}

const std::string& Handle::name() const { return state_->name; }
const std::vector<std::uint8_t>& Handle::gathered() const { return state_->gathered; }
const std::vector<std::int64_t>& Handle::gathered_shape() const { return state_->gathered_shape; }

// ---- options ----

EngineOptions EngineOptions::from_config(const Config& c) {
  EngineOptions o;
  if (c.fusion_bytes < 0) throw_invalid_argument("HPCT_FUSION_BYTES must be >= 0");
  if (c.cycle_ms < 0) throw_invalid_argument("HPCT_CYCLE_MS must be >= 0");
  if (c.cache_capacity < 0) throw_invalid_argument("HPCT_CACHE_CAPACITY must be >= 0");
  if (c.stall_warn_s <= 0) throw_invalid_argument("HPCT_STALL_WARN_S must be > 0");
  o.fusion_bytes = static_cast<std::size_t>(c.fusion_bytes);
  o.cycle_ms = c.cycle_ms;
  o.cache_capacity = static_cast<std::size_t>(c.cache_capacity);
  // Every wait has a bound: unless set, a tensor some ranks never submit
  // fails after the communication timeout, and its warning comes first.
  o.stall_abort_s = c.stall_abort_s < 0 ? c.timeout_s : c.stall_abort_s;
  o.stall_warn_s = o.stall_abort_s > 0 ? std::min(c.stall_warn_s, o.stall_abort_s / 2) : c.stall_warn_s;
  o.timeline_path = c.timeline;
  // A lossy mode is DistributedOptimizer's; what it leaves uncompressed
  // goes as the default would.
  o.compression = is_lossy_compression(c.compression) ? Compression::kAuto : parse_compression(c.compression);
  return o;
}

// ---- Engine: submission ----

Engine::Engine(comm::Communicator& comm, const EngineOptions& options, Logger logger)
    : comm_(comm),
      options_(options),
      logger_(std::move(logger)),
      rank_(comm.rank()),
      size_(comm.size()),
      cycle_(Micros(static_cast<long long>(options.cycle_ms * 1000))),
      idle_period_(std::clamp(Micros(static_cast<long long>(options.stall_warn_s * 250000)),
                              Micros(10000), Micros(1000000))),
      auto_compression_(comm, options.host_identity),
      pending_wait_(std::max(cycle_, Micros(1000))) {
  ControllerOptions co;
  co.fusion_bytes = options.fusion_bytes;
  co.cache_capacity = options.cache_capacity;
  co.stall_warn_s = options.stall_warn_s;
  co.stall_abort_s = options.stall_abort_s;
  controller_ = std::make_unique<Controller>(comm, co, logger_);
  if (rank_ == 0 && !options.timeline_path.empty()) {
    timeline_ = std::make_unique<Timeline>(options.timeline_path);
  }
  thread_ = std::thread([this] { run(); });
}

Engine::~Engine() { shutdown(); }

void Engine::shutdown() {
  {
    std::lock_guard<std::mutex> lk(mu_);
    shutdown_requested_ = true;
  }
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
}

// Called with a handle's State::mu held (Handle::wait); takes mu_, which
// complete() never holds while it takes a State::mu.
void Engine::flush() {
  {
    std::lock_guard<std::mutex> lk(mu_);
    if (flush_requested_) return;
    flush_requested_ = true;
  }
  wake_.notify_one();
}

Engine::Stats Engine::stats() const {
  std::lock_guard<std::mutex> lk(mu_);
  Stats s = stats_;
  s.stall_warnings = controller_->stall_warnings();
  return s;
}

std::vector<std::pair<int, AutoCompression::Decision>> Engine::auto_compression_decisions() const {
  std::lock_guard<std::mutex> lk(mu_);
  return auto_decisions_;
}

Handle Engine::allreduce_async(const std::string& name, TensorRef t, comm::ReduceOp op,
                               std::optional<Compression> compression) {
  Request r;
  r.name = name;
  r.kind = CollectiveKind::kAllreduce;
  r.op = op;
  r.compression = t.dtype == comm::DataType::kFloat32
                      ? compression.value_or(options_.compression)
                      : Compression::kNone;
  return submit(std::move(r), std::move(t), nullptr);
}

Handle Engine::allgather_async(const std::string& name, TensorRef t, OutputAllocator allocate) {
  if (t.shape.empty()) {
    throw_invalid_argument("allgather of tensor '" + name +
                           "': a scalar has no rows to gather; reshape it to [1]");
  }
  Request r;
  r.name = name;
  r.kind = CollectiveKind::kAllgather;
  return submit(std::move(r), std::move(t), std::move(allocate));
}

Handle Engine::broadcast_async(const std::string& name, TensorRef t, int root) {
  if (root < 0 || root >= size_) {
    throw_invalid_argument("broadcast of tensor '" + name + "': root " + std::to_string(root) +
                           " is not a rank of this world of " + std::to_string(size_));
  }
  Request r;
  r.name = name;
  r.kind = CollectiveKind::kBroadcast;
  r.root = root;
  return submit(std::move(r), std::move(t), nullptr);
}

Handle Engine::submit(Request req, TensorRef t, OutputAllocator allocate) {
  req.dtype = t.dtype;
  req.shape = std::move(t.shape);  // the engine keeps only the request's copy
  for (auto d : req.shape) {
    if (d < 0) throw_invalid_argument("tensor '" + req.name + "' has a negative dimension");
  }
  if (t.data == nullptr && req.count() > 0) {
    throw_invalid_argument("tensor '" + req.name + "' has no data (null buffer)");
  }
  auto state = std::make_shared<Handle::State>();
  state->name = req.name;
  state->engine = this;
  {
    std::lock_guard<std::mutex> lk(mu_);
    if (broken_) std::rethrow_exception(broken_);
    if (shutdown_requested_) {
      throw_invalid_argument("tensor '" + req.name + "' submitted after the engine shut down");
    }
    if (held_.count(req.name) != 0) {
      throw_invalid_argument("tensor '" + req.name +
                             "' is already pending on this rank; wait for its handle before "
                             "submitting the name again");
    }
    // Reuse a node (and its string's buffer) of an earlier step's name:
    // a model's tensors come back every step.
    if (!held_spare_.empty()) {
      auto node = std::move(held_spare_.back());
      held_spare_.pop_back();
      node.value() = req.name;
      held_.insert(std::move(node));
    } else {
      held_.insert(req.name);
    }
    Entry e;
    e.req = std::move(req);
    e.tensor = std::move(t);
    e.allocate = std::move(allocate);
    e.state = state;
    e.submitted = SteadyClock::now();
    incoming_.push_back(std::move(e));
    // Only the first tensor of a batch moves the background thread's next
    // round (the fusion window starts with it); waking it for each of a
    // model's tensors costs a context switch each.
    if (incoming_.size() > 1) return Handle(state);
  }
  wake_.notify_one();
  return Handle(state);
}

// ---- Engine: rounds on the caller's thread ----

void Engine::run_rounds_for(Handle::State& s) {
  auto done = [&s] {
    std::lock_guard<std::mutex> lk(s.mu);
    return s.done;
  };
  for (int i = 0; i < kCallerRounds && !done(); ++i) {
    std::unique_lock<std::mutex> rl(round_mu_, std::try_to_lock);
    if (!rl.owns_lock()) return;  // the background thread is in a round
    {
      std::lock_guard<std::mutex> lk(mu_);
      if (stopped_ || broken_ || shutdown_requested_) return;
      take_incoming();
    }
    try {
      if (!round(false)) continue;
    } catch (...) {
      std::lock_guard<std::mutex> lk(mu_);
      stop_error_ = std::current_exception();
    }
    // The engine must stop (a shutdown was announced, or the round failed):
    // the background thread fails what is pending and ends, as if it had
    // run this round itself.
    {
      std::lock_guard<std::mutex> lk(mu_);
      stopped_ = true;
    }
    wake_.notify_all();
    return;
  }
}

// ---- Engine: background thread ----

void Engine::run() {
  std::exception_ptr error;
  try {
    while (true) {
      const bool stop_asked = wait_for_round();
      std::lock_guard<std::mutex> rl(round_mu_);
      {
        std::lock_guard<std::mutex> lk(mu_);
        if (stopped_) {
          if (stop_error_) std::rethrow_exception(stop_error_);
          break;
        }
        // A caller may have run the round this thread woke for.
        if (!stop_asked && !round_due(SteadyClock::now(), nullptr)) continue;
        take_incoming();
      }
      if (round(stop_asked)) break;
    }
  } catch (...) {
    error = std::current_exception();
    try {
      std::rethrow_exception(error);
    } catch (const std::exception& e) {
      logger_.error("engine", std::string("engine stopped: ") + e.what());
    }
  }
  std::lock_guard<std::mutex> rl(round_mu_);
  if (timeline_) timeline_->close();
  {
    std::lock_guard<std::mutex> lk(mu_);
    if (!error && peer_shutdown_rank_ >= 0) {
      // A peer's shutdown ended this engine: what is submitted from now on
      // fails as its pending tensors did, as a peer's doing.
      error = make_error(ErrorCode::kPeerFailure,
                         "the engine on rank " + std::to_string(rank_) +
                             " stopped: the engine was shut down by rank " +
                             std::to_string(peer_shutdown_rank_) + " (its process is ending)");
    }
    if (!error) {
      error = make_error(ErrorCode::kInvalidArgument,
                         "the engine on rank " + std::to_string(rank_) + " is shut down");
    }
    broken_ = error;
    for (auto& e : incoming_) add_pending(std::move(e));
    incoming_.clear();
  }
  fail_all(error);
}

bool Engine::round_due(SteadyClock::time_point now, SteadyClock::time_point* due) const {
  SteadyClock::time_point when;
  if (!incoming_.empty()) {
    // The fusion window: gather what arrives within a cycle of the first
    // new tensor (0: negotiate at once; tensors arriving during a round
    // are batched anyway), unless a caller already waits (flush).
    if (flush_requested_) return true;
    when = incoming_.front().submitted + cycle_;
  } else if (sched_.pending) {
    when = sched_.last_start + sched_.pending_wait;
  } else {
    when = sched_.last_end + idle_period_;
  }
  if (due != nullptr) *due = when;
  return now >= when;
}

bool Engine::wait_for_round() {
  std::unique_lock<std::mutex> lk(mu_);
  while (!shutdown_requested_ && !stopped_) {
    SteadyClock::time_point due;
    if (round_due(SteadyClock::now(), &due)) break;
    wake_.wait_until(lk, due);
  }
  return shutdown_requested_;
}

void Engine::add_pending(Entry e) {
  const std::uint64_t seq = next_seq_++;
  decltype(pending_)::iterator it;
  if (!pending_spare_.empty()) {  // nodes of earlier steps: no allocation
    auto node = std::move(pending_spare_.back());
    pending_spare_.pop_back();
    node.key() = seq;
    node.mapped() = std::move(e);
    it = pending_.insert(std::move(node)).position;
  } else {
    it = pending_.emplace(seq, std::move(e)).first;
  }
  // The key views the name inside the map node, which never moves.
  const std::string_view name(it->second.req.name);
  if (!seq_spare_.empty()) {
    auto node = std::move(seq_spare_.back());
    seq_spare_.pop_back();
    node.key() = name;
    node.mapped() = seq;
    seq_of_.insert(std::move(node));
  } else {
    seq_of_.emplace(name, seq);
  }
}

void Engine::take_incoming() {
  for (auto& e : incoming_) add_pending(std::move(e));
  incoming_.clear();
  flush_requested_ = false;
  ++stats_.rounds;
}

Engine::Entry* Engine::find(std::string_view name) {
  auto it = seq_of_.find(name);
  if (it == seq_of_.end()) return nullptr;
  return &pending_.at(it->second);
}

void Engine::erase(std::string_view name) {
  auto it = seq_of_.find(name);
  if (it == seq_of_.end()) return;
  const std::uint64_t seq = it->second;
  seq_spare_.push_back(seq_of_.extract(it));  // before the node its key views
  auto node = pending_.extract(seq);          // name may view this node: unused from here
  // Release what the caller lent (the keepalive, the handle, the allocator)
  // now, as erasing would; keep the node and its buffers for a later step.
  Entry& e = node.mapped();
  e.tensor.keepalive.reset();
  e.tensor.data = nullptr;
  e.state.reset();
  e.allocate = nullptr;
  if (pending_spare_.size() < kSpareNodes) pending_spare_.push_back(std::move(node));
  if (seq_spare_.size() > kSpareNodes) seq_spare_.pop_back();
}

bool Engine::round(bool shutdown_requested) {
  const auto start = SteadyClock::now();
  last_round_start_ = start;
  bool progress = false;
  auto& cache = controller_->cache();
  // A cached tensor waiting this long for other ranks is reported in full,
  // so the coordinator's stall inspector sees it.
  const auto report_after = std::min<SteadyClock::duration>(Millis(100), idle_period_);

  bool full = cache.size() == 0 || global_pending_;
  if (cache.size() > 0) {
    std::vector<std::uint8_t> bits(cache.size(), 0);
    by_cache_index_.assign(cache.size(), nullptr);
    bool want_full = shutdown_requested;
    for (auto& [seq, e] : pending_) {
      if (e.is_reported) continue;
      auto idx = cache.lookup(e.req);
      if (idx) {
        bits[*idx] = 1;
        by_cache_index_[*idx] = &e;
        if (start - e.submitted > report_after) want_full = true;
      } else {
        want_full = true;
      }
    }
    auto cached = controller_->cached_round(bits, want_full);
    if (!cached.ready.empty()) {
      std::vector<Entry*> es;
      es.reserve(cached.ready.size());
      for (auto idx : cached.ready) {
        Entry* e = by_cache_index_[idx];
        e->reported = start;
        es.push_back(e);
      }
      execute_cached(es);
      progress = true;
    }
    full = full || cached.full_needed;
  }

  bool stop = false;
  if (full) {
    {
      std::lock_guard<std::mutex> lk(mu_);
      ++stats_.full_rounds;
    }
    RequestList mine;
    mine.shutdown = shutdown_requested;
    auto now = SteadyClock::now();
    for (auto& [seq, e] : pending_) {
      if (e.is_reported) continue;
      e.is_reported = true;
      e.reported = now;
      Request r = e.req;
      r.waited_ms = std::chrono::duration_cast<Millis>(now - e.submitted).count();
      mine.requests.push_back(std::move(r));
      progress = true;
    }
    ResponseList answer = controller_->full_round(mine);
    for (const auto& r : answer.responses) execute(r, true);
    progress = progress || !answer.responses.empty();
    global_pending_ = answer.pending;
    if (answer.shutdown) {
      std::string who = answer.shutdown_rank == rank_
                            ? "this rank (" + std::to_string(rank_) + ")"
                            : "rank " + std::to_string(answer.shutdown_rank);
      auto code = answer.shutdown_rank == rank_ ? ErrorCode::kInvalidArgument
                                                : ErrorCode::kPeerFailure;
      std::lock_guard<std::mutex> lk(mu_);
      shutdown_requested_ = true;
      if (answer.shutdown_rank != rank_) peer_shutdown_rank_ = answer.shutdown_rank;
      broken_ = make_error(code, "the engine was shut down by " + who +
                                     " while tensors were pending");
      stop = true;
    }
  }
  // While tensors wait for other ranks, retry every cycle; back off (to 16
  // cycles, at most the idle period) only while rounds change nothing, so a
  // straggler's tensor waits at most that long for this rank to join.
  const Micros floor = std::max(cycle_, Micros(1000));
  pending_wait_ = progress ? floor : std::min({idle_period_, floor * 16, pending_wait_ * 2});
  last_round_end_ = SteadyClock::now();
  {
    std::lock_guard<std::mutex> lk(mu_);
    sched_.pending = !pending_.empty() || global_pending_;
    sched_.last_start = last_round_start_;
    sched_.last_end = last_round_end_;
    sched_.pending_wait = pending_wait_;
  }
  if (stop) {
    std::exception_ptr err;
    {
      std::lock_guard<std::mutex> lk(mu_);
      err = broken_;
    }
    fail_all(err);
  }
  return stop;
}

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
  bool one_group = first.kind == CollectiveKind::kAllreduce;
  for (const Entry* e : es) {
    const Request& q = e->req;
    one_group = one_group && q.kind == CollectiveKind::kAllreduce && q.dtype == first.dtype &&
                q.op == first.op && q.compression == first.compression;
    bytes += q.count() * wire_element_size(q);
  }
  if (one_group && bytes <= controller_->fusion_bytes()) {
    Response r;
    r.type = Response::Type::kAllreduce;
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
  if (timeline_) {
    for (Entry* e : es) {
      timeline_->phase(e->req.name, "queued", e->submitted, e->reported);
      timeline_->phase(e->req.name, "negotiated", e->reported, ready);
    }
  }
  if (r.type == Response::Type::kAllreduce) {
    execute_allreduce(r, es);
  } else if (r.type == Response::Type::kBroadcast) {
    Entry& e = *es[0];
    auto t0 = SteadyClock::now();
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
  complete_all(es, nullptr);
}

// Ends each entry's operation with `error` (nullptr: success). Every handle
// is marked done before the first waiter is woken: a caller waiting on them
// in turn wakes once.
void Engine::complete_all(const std::vector<Entry*>& es, std::exception_ptr error) {
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
    erase(e->req.name);  // drops the keepalive; e is gone
  }
  for (auto& state : states) {
    std::lock_guard<std::mutex> lk(state->mu);
    state->done = true;
    state->error = error;
  }
  for (auto& state : states) state->cv.notify_all();
}

void Engine::execute_allreduce(const Response& r, std::vector<Entry*>& es) {
  std::size_t total = 0;
  for (Entry* e : es) total += e->req.count();
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
  if (!adjacent && !compressed) {
    comm::AllreduceSegmentsOptions so;
    so.dtype = r.dtype;
    so.op = r.op;
    so.segments.reserve(es.size());
    for (Entry* e : es) so.segments.push_back({e->tensor.data, e->req.count()});
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
      return;
    }
  }
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
