// The flight record: every rank's ring of its recent engine operations, and
// what the rank's training loop was doing, written as JSON when the job
// fails so that `hpctrain why` (src/why) can say which collective the job
// stopped in and what the missing ranks did instead (docs/why.md).
//
// Each operation takes one preallocated slot, in submission order (its
// sequence number: the n-th operation this rank submitted). The slot keeps
// the name, kind, dtype, shape and bytes, the path the engine took, the
// times it was submitted, negotiated, started and done (or failed), and the
// call site: a C++ file and line (static strings from __builtin_FILE), or a
// few Python frames copied in. Nothing is allocated per operation: names and
// stacks are copied into fixed buffers (cut when longer), one uncontended
// mutex guards the slots (submitting threads and the engine's round meet on
// it only for a few stores).
//
// FlightDump writes the record to DIR/flight/rank-R.json (whole, under a
// temporary name, then renamed) from a thread of its own: when the engine
// fails an operation (a stall, a mismatch, a communication error), and on
// SIGUSR1 (the rank wrapper sends it when the launcher stops a failed job).
// The signal handler only writes a byte to a pipe.
//
// Threads: every method is thread-safe.
#pragma once

#include <algorithm>
#include <array>
#include <cstddef>
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "core/clock.h"
#include "engine/message.h"

namespace hpct::engine {

// Where an operation was asked for. `file` has static storage (a literal);
// `stack` (Python's frames) is copied when the operation is recorded.
struct CallSite {
  const char* file = nullptr;
  int line = 0;
  std::string_view stack;
  // The caller's file and line, as a default argument of an entry point.
  static CallSite here(const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
    return CallSite{file, line, {}};
  }
};

// What the training loop is doing between collectives.
enum class Phase : std::uint8_t { kNone, kData, kForward, kBackward, kOptimizer, kCheckpoint, kEval };
const char* phase_name(Phase p);
Phase parse_phase(std::string_view name);  // InvalidArgument naming the choices

// How far an operation got. kFailed: it completed with an error.
enum class FlightState : std::uint8_t { kSubmitted, kNegotiated, kStarted, kDone, kFailed };
const char* flight_state_name(FlightState s);

// The path an operation's bytes took (execution.cc).
enum class FlightPath : std::uint8_t {
  kNone, kInPlace, kSegments, kPacked, kCompressed, kDevice, kBroadcast, kAllgather, kReduceScatter
};
const char* flight_path_name(FlightPath p);

struct FlightEntry {
  static constexpr std::size_t kMaxDims = 8;
  static constexpr std::size_t kNameBytes = 96;
  static constexpr std::size_t kStackBytes = 320;

  std::uint64_t seq = 0;  // 1-based; 0: an empty slot
  // Steady-clock nanoseconds of submitted, negotiated, started, done/failed (0: not yet).
  std::array<std::int64_t, 4> t_ns{};
  std::uint64_t bytes = 0;
  std::array<std::int64_t, kMaxDims> shape{};
  std::uint8_t ndim = 0;  // dims kept (at most kMaxDims)
  std::uint8_t full_ndim = 0;
  CollectiveKind kind = CollectiveKind::kAllreduce;
  comm::DataType dtype = comm::DataType::kFloat32;
  comm::ReduceOp op = comm::ReduceOp::kSum;
  FlightState state = FlightState::kSubmitted;
  FlightPath path = FlightPath::kNone;
  std::uint16_t fused = 0;  // tensors in its collective
  int line = 0;
  const char* file = nullptr;
  char name[kNameBytes] = {};    // NUL-terminated, cut to fit
  char stack[kStackBytes] = {};  // NUL-terminated, cut to fit
};

class FlightRecord {
 public:
  // capacity 0: off (every method returns at once).
  explicit FlightRecord(std::size_t capacity);
  FlightRecord(const FlightRecord&) = delete;
  FlightRecord& operator=(const FlightRecord&) = delete;

  bool enabled() const { return !slots_.empty(); }
  std::size_t capacity() const { return slots_.size(); }

  // Records a submission; returns its sequence number (0 when off).
  std::uint64_t submitted(const Request& r, std::uint64_t bytes, const CallSite& site,
                          SteadyClock::time_point t);
  // Moves the operations [first, last) (seq_of(*it): a sequence number) to
  // `state` at t; kStarted also sets the path and how many were fused. A
  // sequence number whose slot was reused since is ignored.
  template <typename It, typename SeqOf>
  void mark(It first, It last, SeqOf seq_of, FlightState state, SteadyClock::time_point t,
            FlightPath path = FlightPath::kNone) {
    if (!enabled()) return;
    const auto n = static_cast<std::uint16_t>(std::min<std::ptrdiff_t>(last - first, 65535));
    std::lock_guard<std::mutex> lk(mu_);
    for (; first != last; ++first) mark_locked(seq_of(*first), state, t, path, n);
  }

  // The training loop's phase (and its step, -1: unknown); lock-free.
  void set_phase(Phase p, std::int64_t step = -1);
  // The first and the last error the engine completed operations with.
  void note_error(const std::string& what);

  struct Snapshot {
    std::vector<FlightEntry> entries;  // oldest first
    std::uint64_t recorded = 0;        // operations ever recorded
    Phase phase = Phase::kNone;
    std::int64_t phase_since_ns = 0;   // steady clock
    std::int64_t step = -1;
    std::string first_error, last_error;
  };
  Snapshot snapshot() const;

 private:
  void mark_locked(std::uint64_t seq, FlightState state, SteadyClock::time_point t, FlightPath path,
                   std::uint16_t fused);

  mutable std::mutex mu_;
  std::vector<FlightEntry> slots_;  // GUARDED_BY(mu_)
  std::uint64_t next_seq_ = 1;      // GUARDED_BY(mu_)
  std::atomic<std::uint8_t> phase_{0};
  std::atomic<std::int64_t> phase_since_ns_{0};
  std::atomic<std::int64_t> step_{-1};
  std::string first_error_, last_error_;  // GUARDED_BY(mu_)
};

// Who wrote a record: placed in its JSON.
struct FlightIdentity {
  int rank = 0;
  int size = 1;
  std::string host;    // empty: gethostname()
  std::string job_id;  // HPCT_JOB_ID, when launch set it
};

// The record as JSON (docs/why.md has the format); times as Unix
// microseconds.
std::string flight_record_json(const FlightRecord::Snapshot& s, const FlightIdentity& who,
                               const std::string& reason);

// Writes a record to DIR/flight/rank-R.json on request, from its own
// thread, and on SIGUSR1 (every FlightDump of the process).
class FlightDump {
 public:
  FlightDump(const FlightRecord& record, std::string dir, FlightIdentity who);
  // Writes what was requested and not yet written, then stops the thread.
  ~FlightDump();
  FlightDump(const FlightDump&) = delete;
  FlightDump& operator=(const FlightDump&) = delete;

  // Asks for a write (never blocks on the file system). The first reason
  // of a batch of requests is kept.
  void request(const std::string& reason);
  // Writes now, on the calling thread; Io when it cannot.
  void write_now(const std::string& reason);
  // Requests written so far (tests).
  std::uint64_t written() const { return written_.load(); }
  std::string path() const;

 private:
  void run();

  const FlightRecord& record_;
  const std::string dir_;
  const FlightIdentity who_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::string pending_reason_;  // GUARDED_BY(mu_): non-empty: a write is due
  bool stop_ = false;           // GUARDED_BY(mu_)
  std::mutex write_mu_;         // one write at a time
  std::atomic<std::uint64_t> written_{0};
  std::thread thread_;
};

}  // namespace hpct::engine
