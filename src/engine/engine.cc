// The engine's submission side and its pacing: handles, the public
// operations, the background thread and rounds run by a waiting caller.
// The rounds themselves are in negotiation.cc, the collectives they decide
// in execution.cc.
#include "engine/engine.h"

#include <algorithm>
#include <cstring>
#include <optional>

#include "comm/reduce.h"
#include "engine/compression.h"
#include "engine/controller.h"
#include "engine/handle_state.h"
#include "engine/timeline.h"

namespace hpct::engine {

// ---- Handle ----

bool Handle::poll() const {
  std::lock_guard<std::mutex> lk(state_->mu);
  return state_->done;
}

void Handle::wait() const {
  if (poll()) {
    std::lock_guard<std::mutex> lk(state_->mu);
    if (state_->error) std::rethrow_exception(state_->error);
  } else {
    // The time this rank waits for the others (and the collective), for
    // the straggler exchange: two clock reads.
    StragglerMeter* meter = state_->meter.get();
    if (meter) meter->begin_wait(SteadyClock::now());
    state_->engine->run_rounds_for(*state_);
    std::unique_lock<std::mutex> lk(state_->mu);
    if (!state_->done) state_->engine->flush();
    state_->cv.wait(lk, [&] { return state_->done; });
    if (meter) meter->end_wait(SteadyClock::now());
    if (state_->error) std::rethrow_exception(state_->error);
  }
  // The device's completion, ordered on the tensor's stream: no host wait.
  if (state_->completion) state_->device->wait(state_->stream, *state_->completion);
}

void Handle::wait(Millis timeout) const {
  const auto deadline = SteadyClock::now() + timeout;
  std::unique_lock<std::mutex> lk(state_->mu);
  if (!state_->done) state_->engine->flush();
  if (!state_->cv.wait_for(lk, timeout, [&] { return state_->done; })) {
    throw_timeout("tensor '" + state_->name + "' was not done within " +
                  std::to_string(timeout.count()) + " ms");
  }
  if (state_->error) std::rethrow_exception(state_->error);
  if (state_->completion) {
    const auto left = std::max(Millis(0), std::chrono::duration_cast<Millis>(deadline - SteadyClock::now()));
    if (!state_->completion->synchronize(left)) {
      throw_timeout("tensor '" + state_->name + "': its result was not written on " + state_->device->str() +
                    " within " + std::to_string(timeout.count()) + " ms");
    }
  }
}

void Handle::wait_on(Stream consumer) const {
  if (!poll()) {
    wait();  // orders the submission stream too: harmless, it is the usual consumer
  } else {
    std::lock_guard<std::mutex> lk(state_->mu);
    if (state_->error) std::rethrow_exception(state_->error);
  }
  if (state_->completion) state_->device->wait(consumer, *state_->completion);
}

std::shared_ptr<DeviceEvent> Handle::completion() const {
  std::lock_guard<std::mutex> lk(state_->mu);
  return state_->completion;
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
  if (c.flight_record_entries < 0) throw_invalid_argument("HPCT_FLIGHT_RECORD_ENTRIES must be >= 0 (0: off)");
  o.flight_entries = static_cast<std::size_t>(c.flight_record_entries);
  o.job_dir = c.job_dir;
  // A lossy mode is DistributedOptimizer's; what it leaves uncompressed
  // goes as the default would.
  o.compression = is_lossy_compression(c.compression) ? Compression::kAuto : parse_compression(c.compression);
  if (c.straggler_window_s < 0)
    throw_invalid_argument("HPCT_STRAGGLER_WINDOW_S must be >= 0 (0: off)");
  if (c.straggler_margin <= 0)
    throw_invalid_argument("HPCT_STRAGGLER_MARGIN must be > 0 (0.2: 20% slower)");
  o.straggler.window_s = c.straggler_window_s;
  o.straggler.margin = c.straggler_margin;
  o.straggler.min_waits = static_cast<int>(std::max<std::int64_t>(0, c.straggler_min_waits));
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
      straggler_(options.straggler, comm.rank(), comm.size(), options.host, logger_),
      pending_wait_(std::max(cycle_, Micros(1000))),
      flight_(options.flight_entries) {
  ControllerOptions co;
  co.fusion_bytes = options.fusion_bytes;
  co.cache_capacity = options.cache_capacity;
  co.stall_warn_s = options.stall_warn_s;
  co.stall_abort_s = options.stall_abort_s;
  controller_ = std::make_unique<Controller>(comm, co, logger_);
  if (rank_ == 0 && !options.timeline_path.empty()) {
    timeline_ = std::make_unique<Timeline>(options.timeline_path);
  }
  if (flight_.enabled() && !options.job_dir.empty()) {
    FlightIdentity who;
    who.rank = rank_;
    who.size = size_;
    flight_dump_ = std::make_unique<FlightDump>(flight_, options.job_dir, who);
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
  // A rank that ends while others still wait for it is often the cause of
  // their failure: its record is written at the end too (the launcher
  // removes the records of a job that succeeds).
  if (flight_dump_) flight_dump_->request("shutdown");
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

void Engine::write_flight_record(const std::string& reason) {
  if (!flight_dump_) {
    throw_invalid_argument("no flight record to write: set HPCT_JOB_DIR (hpctrain launch sets it) and "
                           "HPCT_FLIGHT_RECORD_ENTRIES above 0");
  }
  flight_dump_->write_now(reason);
}

std::vector<std::pair<int, AutoCompression::Decision>> Engine::auto_compression_decisions() const {
  std::lock_guard<std::mutex> lk(mu_);
  return auto_decisions_;
}

Handle Engine::allreduce_async(const std::string& name, TensorRef t, comm::ReduceOp op,
                               std::optional<Compression> compression, const CallSite& site) {
  Request r;
  r.name = name;
  r.kind = CollectiveKind::kAllreduce;
  r.op = op;
  r.compression = t.dtype == comm::DataType::kFloat32
                      ? compression.value_or(options_.compression)
                      : Compression::kNone;
  return submit(std::move(r), std::move(t), nullptr, site);
}

Handle Engine::reduce_scatter_async(const std::string& name, TensorRef t, std::vector<std::int64_t> split,
                                    void* out, comm::ReduceOp op, std::optional<Compression> compression,
                                    const CallSite& site) {
  std::int64_t count = 1;
  for (auto d : t.shape) count *= d;
  const std::string what = "reduce-scatter of tensor '" + name + "'";
  bool ok = split.size() == static_cast<std::size_t>(size_) + 1 && split.front() == 0 && split.back() == count;
  for (std::size_t i = 0; ok && i + 1 < split.size(); ++i) ok = split[i] <= split[i + 1];
  if (!ok) {
    throw_invalid_argument(what + ": split " + shape_string(split) + " must hold " + std::to_string(size_ + 1) +
                           " non-decreasing offsets from 0 to its " + std::to_string(count) + " elements");
  }
  if (op != comm::ReduceOp::kSum && op != comm::ReduceOp::kAvg) {
    throw_invalid_argument(what + ": op " + comm::reduce_op_name(op) + "; a reduce-scatter sums or averages");
  }
  if (t.device != nullptr) {
    throw_invalid_argument(what + ": device tensors are not reduce-scattered by the engine; use allreduce_async");
  }
  Request r;
  r.name = name;
  r.kind = CollectiveKind::kReduceScatter;
  r.op = op;
  r.split = std::move(split);
  r.compression = t.dtype == comm::DataType::kFloat32 ? compression.value_or(options_.compression)
                                                       : Compression::kNone;
  if (out == nullptr) {
    out = static_cast<char*>(t.data) + r.split[static_cast<std::size_t>(rank_)] * comm::dtype_size(t.dtype);
  }
  return submit(std::move(r), std::move(t), nullptr, site, out);
}

Handle Engine::allgather_async(const std::string& name, TensorRef t, OutputAllocator allocate,
                               const CallSite& site) {
  if (t.shape.empty()) {
    throw_invalid_argument("allgather of tensor '" + name +
                           "': a scalar has no rows to gather; reshape it to [1]");
  }
  Request r;
  r.name = name;
  r.kind = CollectiveKind::kAllgather;
  return submit(std::move(r), std::move(t), std::move(allocate), site);
}

Handle Engine::broadcast_async(const std::string& name, TensorRef t, int root, const CallSite& site) {
  if (root < 0 || root >= size_) {
    throw_invalid_argument("broadcast of tensor '" + name + "': root " + std::to_string(root) +
                           " is not a rank of this world of " + std::to_string(size_));
  }
  Request r;
  r.name = name;
  r.kind = CollectiveKind::kBroadcast;
  r.root = root;
  return submit(std::move(r), std::move(t), nullptr, site);
}

Handle Engine::submit(Request req, TensorRef t, OutputAllocator allocate, const CallSite& site, void* out) {
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
  state->meter = straggler_.meter();
  state->device = t.device;
  state->stream = t.stream;
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
    e.out = out;
    e.state = state;
    e.submitted = SteadyClock::now();
    e.flight_seq = flight_.submitted(e.req, e.req.count() * comm::dtype_size(e.req.dtype), site, e.submitted);
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
  release_retired(true);
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

}  // namespace hpct::engine
