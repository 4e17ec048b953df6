// The gradient-sync engine: named asynchronous collectives, served by one
// background thread per process (per in-process rank, in tests) that owns the
// communicator.
//
// A caller submits a named tensor (allreduce_async, allgather_async,
// broadcast_async) and gets a Handle. The background thread negotiates with
// the other ranks which names every rank has submitted (controller.h: ranks
// may submit in any order), fuses ready tensors (fusion.h, in place when they
// are already adjacent in memory), optionally compresses them
// (compression.h), runs the collective and completes the handles. Each name
// must be unique among one rank's pending tensors; the same name may be
// submitted again once its handle is done (every training step).
//
// Pacing (why the thread never spins): it sleeps on a condition variable and
// enters a negotiation round (a) HPCT_CYCLE_MS after a new tensor arrived
// (the fusion window; tensors that arrive while a round runs are batched
// anyway), or at once when a caller waits on a handle whose tensor is not
// done (flush(): the caller submits nothing more until it wakes, so waiting
// out the window gains nothing; DistributedOptimizer::step() ends backward
// this way), (b) every max(HPCT_CYCLE_MS, 1 ms) while tensors are pending
// anywhere (backing off to 16 times that while rounds change nothing), (c)
// otherwise once per idle period (min(1 s, HPCT_STALL_WARN_S / 4)), so a rank
// that waits for a silent one is not stuck in a collective, stalls are
// reported and shutdowns are seen.
//
// Errors: a rank mismatch (shape, dtype, op, kind) fails that tensor's
// handle on every rank with Mismatch naming the tensor, the ranks and their
// shapes. A stall logs a warning after HPCT_STALL_WARN_S and fails the
// tensor with Timeout after HPCT_STALL_ABORT_S (HPCT_TIMEOUT_S unless set; 0:
// never). A communicator error (Timeout, PeerFailure) fails every pending
// handle with that error and breaks the engine: later submissions raise it at
// once. shutdown() (and the destructor) fails pending handles on every rank
// (the shutdown is announced to all ranks) and never hangs longer than the
// communicator's timeout.
//
// Ownership: tensors are caller-owned memory (TensorRef) that must stay valid
// and untouched until the handle is done; TensorRef::keepalive is released
// then. The communicator must outlive the engine, and nothing else may use it
// while the engine runs.
//
// Rounds on the caller's thread: Handle::wait() (without a timeout) first
// tries to run up to kCallerRounds rounds itself, when the background thread
// is not in one (round_mu_ is the right to run a round). A caller that waits
// has nothing else to do, and running the round where it already is saves
// two thread wake-ups per step (waking the background thread, and being
// woken by it), which on a host whose cores all compute is a good part of a
// small model's sync time. The background thread then finds the round done
// and sleeps on; it keeps pacing rounds for tensors nobody waits for yet.
//
// Device tensors (TensorRef::device set; device.h has the protocol): the
// engine orders its work on the device's communication stream after each
// tensor's readiness event and completes the handle with a completion event
// on that stream. The collective runs on that stream through
// EngineOptions::stream_collectives when it serves the device (NCCL), or
// staged through pinned host memory and the communicator otherwise (the
// engine's thread then waits for the stream, bounded by the communicator's
// timeout). fp16/bf16 compression of a device tensor casts on the device
// when the device can (Device::can_cast), in host staging memory otherwise.
// A fused group may mix host tensors with the tensors of one device; two
// devices in one group fail it with InvalidArgument. Host tensors (device
// null) take the host path unchanged.
//
// Threads: every public method is thread-safe. Handle is a cheap copyable
// reference; wait() blocks, poll() does not.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "comm/communicator.h"
#include "core/clock.h"
#include "core/config.h"
#include "core/log.h"
#include "engine/auto_compression.h"
#include "engine/device.h"
#include "engine/flight_record.h"
#include "engine/fusion.h"
#include "engine/message.h"
#include "engine/straggler.h"

namespace hpct::engine {

class Controller;
class Timeline;

struct EngineOptions {
  std::size_t fusion_bytes = 64 << 20;  // HPCT_FUSION_BYTES
  double cycle_ms = 5;                  // HPCT_CYCLE_MS
  std::size_t cache_capacity = 1024;    // HPCT_CACHE_CAPACITY (0: no cache)
  double stall_warn_s = 60;             // HPCT_STALL_WARN_S
  double stall_abort_s = 0;             // HPCT_STALL_ABORT_S (from_config: -1 becomes HPCT_TIMEOUT_S; 0: never)
  std::string timeline_path;            // HPCT_TIMELINE (rank 0 writes it)
  std::size_t flight_entries = 2000;    // HPCT_FLIGHT_RECORD_ENTRIES (0: no flight record)
  std::string job_dir;                  // HPCT_JOB_DIR: where the flight record is written (empty: never)
  Compression compression = Compression::kNone;  // HPCT_COMPRESSION, for float32 allreduce (its default: auto)
  // kAuto: which ranks share a host (null: comm::host_identity). Tests only.
  std::function<std::int64_t()> host_identity;
  // Collectives enqueued on a device's stream (device.h; an NCCL
  // communicator). Null: device tensors are staged through host memory and
  // the communicator.
  std::shared_ptr<StreamCollectives> stream_collectives;
  // Stragglers (straggler.h): HPCT_STRAGGLER_*, and this rank's host as
  // rank 0's warning names it (HPCT_HOSTNAME; set by hpct::init).
  StragglerOptions straggler;
  std::string host = "?";

  static EngineOptions from_config(const Config& config);
};

// Caller-owned memory of one tensor: dense, row-major.
struct TensorRef {
  TensorRef() = default;
  TensorRef(void* data_, comm::DataType dtype_, std::vector<std::int64_t> shape_,
            std::shared_ptr<void> keepalive_ = nullptr)
      : data(data_), dtype(dtype_), shape(std::move(shape_)), keepalive(std::move(keepalive_)) {}

  void* data = nullptr;
  comm::DataType dtype = comm::DataType::kFloat32;
  std::vector<std::int64_t> shape;
  // Released when the operation is done (device tensors: once the
  // completion event fired).
  std::shared_ptr<void> keepalive;
  // Where data lives: null for host memory (the CPU path); otherwise a
  // caller-owned device that outlives the operation and its handle.
  Device* device = nullptr;
  // Device tensors: fires once data is written (null: it already is), and
  // the stream that Handle::wait() makes wait for the result (the
  // producer's, which is the consumer's in training).
  std::shared_ptr<DeviceEvent> ready;
  Stream stream;
};

// Where allgather writes its result, given the result's shape (called once,
// on the background thread, before the collective).
using OutputAllocator = std::function<void*(const std::vector<std::int64_t>& shape)>;

class Handle {
 public:
  Handle() = default;
  bool valid() const { return state_ != nullptr; }
  // True once the operation finished (successfully or not). Never blocks.
  bool poll() const;
  // Blocks until done; rethrows the operation's error. A device tensor's
  // result may still be in flight on the device then: its stream
  // (TensorRef::stream) is made to wait for it, the host goes on.
  void wait() const;
  // As wait(), but raises Timeout naming the tensor after `timeout`; a
  // device tensor's result is complete (the host waited for it) on return.
  void wait(Millis timeout) const;
  // Device tensors: makes `consumer` (a stream of the tensor's device) wait
  // for the result; returns without blocking the host once the handle is
  // done (wait() first otherwise). Host tensors: wait().
  void wait_on(Stream consumer) const;
  // Device tensors: the event that fires when the result is written (null
  // until done, and for host tensors).
  std::shared_ptr<DeviceEvent> completion() const;
  const std::string& name() const;
  // Allgather without an allocator: the result's bytes and shape.
  const std::vector<std::uint8_t>& gathered() const;
  const std::vector<std::int64_t>& gathered_shape() const;

  struct State;

 private:
  friend class Engine;
  explicit Handle(std::shared_ptr<State> s) : state_(std::move(s)) {}
  std::shared_ptr<State> state_;
};

class Engine {
 public:
  // Starts the background thread. Opens the timeline on rank 0 (Io if it
  // cannot). Does not communicate.
  Engine(comm::Communicator& comm, const EngineOptions& options, Logger logger);
  // shutdown().
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // In place: t becomes the reduction over ranks. kAvg averages. compression
  // defaults to the engine's (applies to float32 only). InvalidArgument for a
  // duplicate pending name, a null buffer or an op the dtype cannot take.
  // `site` (every operation): where it was asked for, kept in the flight
  // record (flight_record.h); the caller's line unless given.
  Handle allreduce_async(const std::string& name, TensorRef t, comm::ReduceOp op,
                         std::optional<Compression> compression = std::nullopt,
                         const CallSite& site = CallSite::here());
  // The rows (first dimension) of every rank's t, in rank order; ranks may
  // have different first dimensions. Output through `allocate` or, when it is
  // null, in the handle (gathered()).
  Handle allgather_async(const std::string& name, TensorRef t, OutputAllocator allocate = nullptr,
                         const CallSite& site = CallSite::here());
  // Reduce-scatter by element ranges: rank p keeps elements [split[p],
  // split[p + 1]) of t (row-major; split has size + 1 non-decreasing
  // offsets from 0 to t's element count, the same on every rank, or the
  // handle fails with Mismatch on every rank). This rank's range, reduced
  // over the ranks (kSum or kAvg), is written to `out` (split[rank + 1] -
  // split[rank] elements, caller-owned until done; null: into t's own
  // range); the rest of t is only read. Reduce-scatters of one dtype, op
  // and compression fuse as allreduces do: the packed buffer holds every
  // tensor's range of rank 0, then of rank 1, ..., and one reduce-scatter
  // with per-rank counts (comm/communicator.h: summed in rank order, the
  // shared-memory allreduce's order) sends each rank what it keeps. Host
  // tensors only; InvalidArgument for a bad split, another op or a device
  // tensor.
  Handle reduce_scatter_async(const std::string& name, TensorRef t, std::vector<std::int64_t> split, void* out,
                              comm::ReduceOp op, std::optional<Compression> compression = std::nullopt,
                              const CallSite& site = CallSite::here());
  // In place: t on root is copied to every rank.
  Handle broadcast_async(const std::string& name, TensorRef t, int root, const CallSite& site = CallSite::here());

  // Starts a round now instead of at the end of the fusion window (see
  // Pacing). Handle::wait() calls it; a caller that submitted its last
  // tensor for a while may too.
  void flush();

  // Announces the shutdown to every rank, fails every pending handle, joins
  // the thread. Idempotent; never throws.
  void shutdown();

  // This rank's flight record: its recent operations and the training
  // loop's phase (set_phase). Written to HPCT_JOB_DIR/flight on a failed
  // operation and on SIGUSR1 when a job directory is set.
  FlightRecord& flight_record() { return flight_; }
  // Writes the flight record now (Io when it cannot; InvalidArgument
  // without a job directory).
  void write_flight_record(const std::string& reason);

  int rank() const { return rank_; }
  int size() const { return size_; }
  // The communicator it moves tensors with (for its thread-safe statistics).
  const comm::Communicator& communicator() const { return comm_; }
  const EngineOptions& options() const { return options_; }

  // Counters for tests and benchmarks (thread-safe snapshots).
  struct Stats {
    std::uint64_t rounds = 0;          // negotiation rounds
    std::uint64_t full_rounds = 0;     // rounds that needed the coordinator
    std::uint64_t collectives = 0;     // data collectives run
    std::uint64_t packed_bytes = 0;    // bytes copied into the fusion buffer
    std::uint64_t in_place_bytes = 0;  // bytes sent without the fusion buffer (adjacent, or segments)
    std::uint64_t compressed_collectives = 0;  // allreduces sent as 16-bit floats
    std::uint64_t allreduce_tensor_bytes = 0;  // allreduced tensors' own bytes
    std::uint64_t allreduce_wire_bytes = 0;    // the same after compression
    std::uint64_t reduce_scatter_tensor_bytes = 0;  // reduce-scattered tensors' own bytes (whole tensors)
    // What this rank sent of them: every rank's range but its own, after
    // compression (an allreduce of S bytes sends S (n-1)/n on a ring twice,
    // S with 2 ranks).
    std::uint64_t reduce_scatter_sent_bytes = 0;
    std::uint64_t stall_warnings = 0;          // stall warnings this rank logged (the coordinator's)
  };
  Stats stats() const;
  // The training loop's parts of one step (seconds): waiting for its batch,
  // and its own compute (forward, backward, optimizer). They tell where a
  // straggler's time goes. Thread-safe, cheap.
  void note_work(double data_s, double compute_s) {
    straggler_.meter()->add_work(data_s, compute_s);
  }
  // Every rank's straggler standing as of the last exchange, in rank order
  // (empty before it; straggler.h). Thread-safe copy.
  std::vector<StragglerRank> straggler_status() const { return straggler_.status(); }
  // What compression auto decided so far, per size class (thread-safe copy).
  std::vector<std::pair<int, AutoCompression::Decision>> auto_compression_decisions() const;

 private:
  struct Entry {
    Request req;
    TensorRef tensor;
    OutputAllocator allocate;
    std::shared_ptr<Handle::State> state;
    SteadyClock::time_point submitted;
    SteadyClock::time_point reported;
    bool is_reported = false;
    std::shared_ptr<DeviceEvent> completion;  // device tensors: set by the execution
    std::uint64_t flight_seq = 0;             // its slot in the flight record
    void* out = nullptr;                      // reduce-scatter: where this rank's range goes
  };
  // A device's memory for the engine (execution_device.cc).
  struct DeviceSlots;

  friend class Handle;  // wait() runs rounds (run_rounds_for)
  static constexpr int kCallerRounds = 3;

  Handle submit(Request req, TensorRef t, OutputAllocator allocate, const CallSite& site, void* out = nullptr);
  // The entries' flight-record states (flight_record.h).
  void flight_mark(const std::vector<Entry*>& es, FlightState s, SteadyClock::time_point t,
                   FlightPath path = FlightPath::kNone) {
    flight_.mark(es.begin(), es.end(), [](const Entry* e) { return e->flight_seq; }, s, t, path);
  }
  void run();
  // Handle::wait(): rounds on the caller's thread until s is done, at most
  // kCallerRounds, while no other thread runs one. Takes round_mu_ (try),
  // then mu_; never called with a State::mu held.
  void run_rounds_for(Handle::State& s);
  // Sleeps until the pacing rule says a round is due (or stop); returns
  // whether a shutdown was requested.
  bool wait_for_round();
  // The pacing rule (mu_ held): whether a round is due at `now`, and when.
  bool round_due(SteadyClock::time_point now, SteadyClock::time_point* due) const;
  // Moves submissions into pending_ (round_mu_ and mu_ held).
  void take_incoming();
  // Negotiation (negotiation.cc).
  // One round (controller.h); returns true when the engine must stop.
  bool round(bool shutdown_requested);
  // The cached phase: a bit per response-cache entry; executes what every
  // rank holds; returns whether a full phase is needed.
  bool cached_phase(SteadyClock::time_point start, bool shutdown_requested, bool* progress);
  // The full phase through the coordinator; returns true when a shutdown
  // was announced (broken_ set).
  bool full_phase(bool shutdown_requested, bool* progress);
  // Execution (execution.cc).
  void execute(const Response& r, bool from_full);
  void execute_cached(std::vector<Entry*>& es);
  void execute_entries(const Response& r, std::vector<Entry*>& es, bool from_full);
  void execute_allreduce(const Response& r, std::vector<Entry*>& es);
  void execute_reduce_scatter(const Response& r, std::vector<Entry*>& es);  // execution_scatter.cc
  // The compression of a response's allreduce (auto: a collective probe per
  // size class, the same on every rank).
  Compression allreduce_compression(const Response& r, std::size_t total);
  // Scattered tensors reduced in place by segments, when the communicator
  // can (the shared-memory path); false when it cannot.
  bool allreduce_segments(const Response& r, std::vector<Entry*>& es, std::size_t total, std::size_t wire_size,
                          SteadyClock::time_point t_fuse);
  // Device tensors (execution_device.cc). The group's device, or null when
  // every entry is host memory (InvalidArgument for two devices).
  Device* device_of(const std::vector<Entry*>& es) const;
  DeviceSlots& slots(Device& d);
  void execute_allreduce_device(const Response& r, std::vector<Entry*>& es, Device& d,
                                Compression compression);
  void execute_broadcast_device(const Response& r, Entry& e, Device& d);
  void execute_allgather_device(const Response& r, Entry& e, Device& d);
  // Drops the keepalives whose completion event fired (`all`: waits for
  // each, bounded by the communicator's timeout).
  void release_retired(bool all);
  void complete(Entry& e, std::exception_ptr error);
  void note_flight_error(std::exception_ptr error);  // execution.cc
  void complete_all(const std::vector<Entry*>& es, std::exception_ptr error);
  void fail_all(std::exception_ptr error);
  Entry* find(std::string_view name);
  void erase(std::string_view name);
  void add_pending(Entry e);  // into pending_ and seq_of_

  comm::Communicator& comm_;
  const EngineOptions options_;
  Logger logger_;
  const int rank_;
  const int size_;
  using Micros = std::chrono::microseconds;
  const Micros cycle_;
  const Micros idle_period_;

  // Shared with submitting threads.
  mutable std::mutex mu_;
  std::condition_variable wake_;
  std::vector<Entry> incoming_;             // GUARDED_BY(mu_)
  std::unordered_set<std::string> held_;    // names pending on this rank; GUARDED_BY(mu_)
  std::vector<std::unordered_set<std::string>::node_type> held_spare_;  // GUARDED_BY(mu_)
  bool shutdown_requested_ = false;         // GUARDED_BY(mu_)
  bool flush_requested_ = false;            // GUARDED_BY(mu_): a round is due now
  std::exception_ptr broken_;               // GUARDED_BY(mu_): set when the thread stopped
  bool stopped_ = false;                    // GUARDED_BY(mu_): a caller's round ended the engine
  int peer_shutdown_rank_ = -1;             // GUARDED_BY(mu_): the peer whose shutdown ended it
  std::exception_ptr stop_error_;           // GUARDED_BY(mu_): and the error it raised
  Stats stats_;                             // GUARDED_BY(mu_)
  // Used by whoever runs a round; its decisions copied out under mu_.
  AutoCompression auto_compression_;
  std::vector<std::pair<int, AutoCompression::Decision>> auto_decisions_;  // GUARDED_BY(mu_)
  struct Schedule {                         // the last round's pacing, for wait_for_round
    bool pending = false;                   // tensors pending here or anywhere
    SteadyClock::time_point last_start{};
    SteadyClock::time_point last_end{};
    Micros pending_wait{0};
  } sched_;                                 // GUARDED_BY(mu_)

  // Whoever holds round_mu_: the background thread or a waiting caller
  // (run_rounds_for). Lock order: round_mu_, then mu_ or a State::mu.
  std::mutex round_mu_;
  std::unique_ptr<Controller> controller_;
  std::unique_ptr<Timeline> timeline_;
  StragglerWatch straggler_;  // after_round: round_mu_ held
  FusionBuffer fusion_;
  std::map<Device*, std::unique_ptr<DeviceSlots>> device_slots_;
  // Keepalives of completed device tensors whose completion event has not
  // fired yet (the device may still write them).
  std::vector<std::pair<std::shared_ptr<DeviceEvent>, std::shared_ptr<void>>> retired_;
  std::map<std::uint64_t, Entry> pending_;  // by submission sequence
  std::unordered_map<std::string_view, std::uint64_t> seq_of_;  // keys view pending_'s names
  // Nodes of completed entries, reused by the next step's tensors so that a
  // steady-state step allocates no map nodes (at most kSpareNodes each).
  static constexpr std::size_t kSpareNodes = 4096;
  std::vector<std::map<std::uint64_t, Entry>::node_type> pending_spare_;
  std::vector<std::unordered_map<std::string_view, std::uint64_t>::node_type> seq_spare_;
  std::vector<Entry*> by_cache_index_;  // this round's cached entries (round() only)
  std::uint64_t next_seq_ = 0;
  bool global_pending_ = false;
  Micros pending_wait_;
  SteadyClock::time_point last_round_start_{};
  SteadyClock::time_point last_round_end_{};

  FlightRecord flight_;
  std::unique_ptr<FlightDump> flight_dump_;  // null without a job directory
  std::thread thread_;
};

}  // namespace hpct::engine
