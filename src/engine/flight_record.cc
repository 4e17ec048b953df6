#include "engine/flight_record.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include <nlohmann/json.hpp>

#include "core/error.h"

namespace hpct::engine {
namespace {

std::int64_t steady_ns(SteadyClock::time_point t) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count();
}

// Copies s into a fixed buffer, cut to fit, NUL-terminated.
template <std::size_t N>
void copy_cut(char (&dst)[N], std::string_view s) {
  const std::size_t n = std::min(s.size(), N - 1);
  std::memcpy(dst, s.data(), n);
  dst[n] = '\0';
}

constexpr const char* kPhaseNames[] = {"none", "data", "forward", "backward", "optimizer", "checkpoint", "eval"};

}  // namespace

const char* phase_name(Phase p) {
  const auto i = static_cast<std::size_t>(p);
  return i < std::size(kPhaseNames) ? kPhaseNames[i] : "?";
}

Phase parse_phase(std::string_view name) {
  for (std::size_t i = 0; i < std::size(kPhaseNames); ++i) {
    if (name == kPhaseNames[i]) return static_cast<Phase>(i);
  }
  throw_invalid_argument("phase '" + std::string(name) +
                         "': choose none, data, forward, backward, optimizer, checkpoint or eval");
}

const char* flight_state_name(FlightState s) {
  switch (s) {
    case FlightState::kSubmitted: return "submitted";
    case FlightState::kNegotiated: return "negotiated";
    case FlightState::kStarted: return "started";
    case FlightState::kDone: return "done";
    case FlightState::kFailed: return "failed";
  }
  return "?";
}

const char* flight_path_name(FlightPath p) {
  switch (p) {
    case FlightPath::kNone: return "";
    case FlightPath::kInPlace: return "in place";
    case FlightPath::kSegments: return "segments";
    case FlightPath::kPacked: return "packed";
    case FlightPath::kCompressed: return "compressed";
    case FlightPath::kDevice: return "device";
    case FlightPath::kBroadcast: return "broadcast";
    case FlightPath::kAllgather: return "allgather";
    case FlightPath::kReduceScatter: return "reduce-scatter";
  }
  return "?";
}

// ---- FlightRecord ----

FlightRecord::FlightRecord(std::size_t capacity) : slots_(capacity) {}

std::uint64_t FlightRecord::submitted(const Request& r, std::uint64_t bytes, const CallSite& site,
                                      SteadyClock::time_point t) {
  if (!enabled()) return 0;
  std::lock_guard<std::mutex> lk(mu_);
  const std::uint64_t seq = next_seq_++;
  FlightEntry& e = slots_[(seq - 1) % slots_.size()];
  e.seq = seq;
  e.t_ns = {steady_ns(t), 0, 0, 0};
  e.bytes = bytes;
  e.full_ndim = static_cast<std::uint8_t>(std::min<std::size_t>(r.shape.size(), 255));
  e.ndim = static_cast<std::uint8_t>(std::min(r.shape.size(), FlightEntry::kMaxDims));
  std::copy(r.shape.begin(), r.shape.begin() + e.ndim, e.shape.begin());
  e.kind = r.kind;
  e.dtype = r.dtype;
  e.op = r.op;
  e.state = FlightState::kSubmitted;
  e.path = FlightPath::kNone;
  e.fused = 0;
  e.file = site.file;
  e.line = site.line;
  copy_cut(e.name, r.name);
  copy_cut(e.stack, site.stack);
  return seq;
}

void FlightRecord::mark_locked(std::uint64_t seq, FlightState state, SteadyClock::time_point t,
                               FlightPath path, std::uint16_t fused) {
  if (seq == 0) return;
  FlightEntry& e = slots_[(seq - 1) % slots_.size()];
  if (e.seq != seq) return;
  const auto i = std::min<std::size_t>(static_cast<std::size_t>(state), 3);
  e.t_ns[i] = steady_ns(t);
  e.state = state;
  if (state == FlightState::kStarted) {
    e.path = path;
    e.fused = fused;
  }
}

void FlightRecord::set_phase(Phase p, std::int64_t step) {
  if (!enabled()) return;
  phase_since_ns_.store(steady_ns(SteadyClock::now()), std::memory_order_relaxed);
  if (step >= 0) step_.store(step, std::memory_order_relaxed);
  phase_.store(static_cast<std::uint8_t>(p), std::memory_order_release);
}

void FlightRecord::note_error(const std::string& what) {
  if (!enabled()) return;
  std::lock_guard<std::mutex> lk(mu_);
  if (first_error_.empty()) first_error_ = what;
  last_error_ = what;
}

FlightRecord::Snapshot FlightRecord::snapshot() const {
  Snapshot s;
  s.phase = static_cast<Phase>(phase_.load(std::memory_order_acquire));
  s.phase_since_ns = phase_since_ns_.load(std::memory_order_relaxed);
  s.step = step_.load(std::memory_order_relaxed);
  if (!enabled()) return s;
  std::vector<FlightEntry> copy;
  {
    std::lock_guard<std::mutex> lk(mu_);
    copy = slots_;
    s.recorded = next_seq_ - 1;
    s.first_error = first_error_;
    s.last_error = last_error_;
  }
  // Oldest first: the slots after the newest one, then those up to it.
  const std::size_t n = copy.size();
  const std::size_t start = s.recorded < n ? 0 : s.recorded % n;
  s.entries.reserve(std::min<std::uint64_t>(s.recorded, n));
  for (std::size_t k = 0; k < n; ++k) {
    const FlightEntry& e = copy[(start + k) % n];
    if (e.seq != 0) s.entries.push_back(e);
  }
  return s;
}

// ---- JSON ----

std::string flight_record_json(const FlightRecord::Snapshot& s, const FlightIdentity& who,
                               const std::string& reason) {
  // Steady times become Unix microseconds through one pair of readings.
  const std::int64_t unix_us_now = unix_ns() / 1000;
  const std::int64_t steady_us_now = steady_ns(SteadyClock::now()) / 1000;
  auto unix_us = [&](std::int64_t ns) -> nlohmann::json {
    if (ns == 0) return nullptr;
    return unix_us_now - (steady_us_now - ns / 1000);
  };
  std::string host = who.host;
  if (host.empty()) {
    char buf[256] = {};
    if (::gethostname(buf, sizeof buf - 1) == 0) host = buf;
  }
  nlohmann::json j;
  j["format"] = "hpctrain-flight-record/1";
  j["rank"] = who.rank;
  j["size"] = who.size;
  j["host"] = host;
  j["pid"] = static_cast<int>(::getpid());
  if (!who.job_id.empty()) j["job_id"] = who.job_id;
  j["reason"] = reason;
  j["written_unix_us"] = unix_us_now;
  j["phase"] = {{"name", phase_name(s.phase)}, {"since_unix_us", unix_us(s.phase_since_ns)}, {"step", s.step}};
  j["first_error"] = s.first_error;
  j["last_error"] = s.last_error;
  j["recorded"] = s.recorded;
  nlohmann::json entries = nlohmann::json::array();
  for (const FlightEntry& e : s.entries) {
    nlohmann::json x;
    x["seq"] = e.seq;
    x["name"] = e.name;
    x["op"] = kind_name(e.kind);
    if (e.kind == CollectiveKind::kAllreduce || e.kind == CollectiveKind::kReduceScatter) x["reduce"] = comm::reduce_op_name(e.op);
    x["dtype"] = comm::dtype_name(e.dtype);
    x["shape"] = std::vector<std::int64_t>(e.shape.begin(), e.shape.begin() + e.ndim);
    if (e.full_ndim > e.ndim) x["shape_cut"] = true;
    x["bytes"] = e.bytes;
    x["state"] = flight_state_name(e.state);
    x["path"] = flight_path_name(e.path);
    x["fused"] = e.fused;
    x["submitted_us"] = unix_us(e.t_ns[0]);
    x["negotiated_us"] = unix_us(e.t_ns[1]);
    x["started_us"] = unix_us(e.t_ns[2]);
    x["ended_us"] = unix_us(e.t_ns[3]);
    if (e.file != nullptr) x["site"] = std::string(e.file) + ":" + std::to_string(e.line);
    if (e.stack[0] != '\0') x["stack"] = e.stack;
    entries.push_back(std::move(x));
  }
  j["entries"] = std::move(entries);
  return j.dump(1) + "\n";
}

}  // namespace hpct::engine
