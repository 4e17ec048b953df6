// Stragglers (straggler.h): the rule over a window of exchanged figures, the
// meter each rank keeps, and the exchange.
#include "engine/straggler.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>

namespace hpct::engine {

const char* straggler_cause_name(StragglerCause c) {
  switch (c) {
    case StragglerCause::kData:
      return "data";
    case StragglerCause::kNetwork:
      return "network";
    case StragglerCause::kCompute:
      break;
  }
  return "compute";
}

double straggler_median(std::vector<double> v) {
  if (v.empty()) return 0;
  const std::size_t m = v.size() / 2;
  std::nth_element(v.begin(), v.begin() + m, v.end());
  if (v.size() % 2 == 1) return v[m];
  const double upper = v[m];
  return (upper + *std::max_element(v.begin(), v.begin() + m)) / 2;
}

// ---- the rule ----

StragglerDetector::StragglerDetector(const StragglerOptions& options, int size)
    : options_(options),
      ranks_(size),
      warmup_left_s_(options.window_s / 2),
      over_(size, 0),
      under_(size, 0) {
  for (int r = 0; r < size; ++r) ranks_[r].rank = r;
}

std::vector<StragglerDetector::Change> StragglerDetector::add(
    const std::vector<StragglerSample>& in) {
  const int n = static_cast<int>(ranks_.size());
  if (static_cast<int>(in.size()) != n) return {};
  double duration = 0;
  for (int r = 0; r < n; ++r) {
    duration = std::max(duration, in[r].elapsed_s);
    ranks_[r].host = in[r].host;
    ranks_[r].waited_s += in[r].blocked_s;
    std::vector<double> others;
    for (int i = 0; i < n; ++i)
      if (i != r) others.push_back(in[i].blocked_s);
    ranks_[r].late_s += std::max(0.0, straggler_median(others) - in[r].blocked_s);
  }
  // The job's start (loading, the first broadcasts from rank 0, warm-up
  // steps) is not the ranks' steady pace: its first half window is not judged.
  if (warmup_left_s_ > 0) {
    warmup_left_s_ -= duration;
    return {};
  }
  intervals_.push_back(in);
  durations_.push_back(duration);
  covered_s_ += duration;
  while (intervals_.size() > 1 && covered_s_ - durations_.front() >= options_.window_s) {
    covered_s_ -= durations_.front();
    durations_.pop_front();
    intervals_.pop_front();
  }
  if (n < 2 || covered_s_ < options_.window_s) return {};
  return judge(window_sums());
}

std::vector<StragglerDetector::Sums> StragglerDetector::window_sums() const {
  std::vector<Sums> s(ranks_.size());
  for (const auto& interval : intervals_) {
    for (std::size_t r = 0; r < s.size(); ++r) {
      const StragglerSample& x = interval[r];
      s[r].elapsed += x.elapsed_s;
      s[r].blocked += x.blocked_s;
      s[r].waits += x.waits;
      s[r].comm += x.comm_s;
      s[r].data += x.data_s;
      s[r].compute += x.compute_s;
      s[r].steps += x.steps;
    }
  }
  return s;
}

StragglerCause StragglerDetector::cause_of(int r, const std::vector<Sums>& s) const {
  const int n = static_cast<int>(s.size());
  auto excess = [&](auto part) {
    std::vector<double> others;
    for (int i = 0; i < n; ++i)
      if (i != r) others.push_back(part(s[i]));
    return part(s[r]) - straggler_median(others);
  };
  bool parts = true;
  for (const Sums& x : s) parts = parts && x.steps > 0;
  const double network = excess([](const Sums& x) { return x.comm; });
  double data = -std::numeric_limits<double>::infinity();
  double compute;
  if (parts) {
    data = excess([](const Sums& x) { return x.data; });
    compute = excess([](const Sums& x) { return x.compute; });
  } else {  // no step parts: work outside collectives counts as compute
    compute = excess([](const Sums& x) { return std::max(0.0, x.elapsed - x.blocked) - x.comm; });
  }
  if (network > compute && network > data) return StragglerCause::kNetwork;
  return data > compute ? StragglerCause::kData : StragglerCause::kCompute;
}

std::vector<StragglerDetector::Change> StragglerDetector::judge(const std::vector<Sums>& s) {
  const int n = static_cast<int>(s.size());
  std::vector<double> work(n);
  bool enough = true;
  for (int r = 0; r < n; ++r) {
    work[r] = std::max(0.0, s[r].elapsed - s[r].blocked);
    enough = enough && s[r].waits >= options_.min_waits;
  }
  int candidate = 0;
  for (int r = 0; r < n; ++r) {
    std::vector<double> others;
    for (int i = 0; i < n; ++i)
      if (i != r) others.push_back(work[i]);
    const double median = straggler_median(others);
    ranks_[r].slowdown = median > 0 ? work[r] / median - 1 : 0;
    if (ranks_[r].slowdown > ranks_[candidate].slowdown) candidate = r;
  }
  std::vector<Change> changes;
  char line[256];
  const int window = static_cast<int>(std::lround(covered_s_));
  for (int r = 0; r < n; ++r) {
    StragglerRank& k = ranks_[r];
    const bool over = enough && r == candidate && k.slowdown >= options_.margin;
    over_[r] = over ? over_[r] + 1 : 0;
    if (!k.named && over_[r] >= options_.persist) {
      k.named = true;
      under_[r] = 0;
      k.cause = cause_of(r, s);
      std::snprintf(
          line, sizeof line,
          "rank %d on host %s is the slowest for the last %d s: %.0f%% slower than the median, "
          "the time goes to %s",
          r, k.host.c_str(), window, 100 * k.slowdown, straggler_cause_name(k.cause));
      changes.push_back({r, true, line});
    } else if (k.named) {
      k.cause = cause_of(r, s);
      under_[r] = k.slowdown < options_.margin / 2 ? under_[r] + 1 : 0;
      if (under_[r] >= options_.persist) {
        k.named = false;
        std::snprintf(
            line, sizeof line,
            "rank %d on host %s is no longer the slowest: %.0f%% slower than the median over the "
            "last %d s",
            r, k.host.c_str(), 100 * std::max(0.0, k.slowdown), window);
        changes.push_back({r, false, line});
      }
    }
  }
  return changes;
}

// ---- this rank's figures ----

void StragglerMeter::begin_wait(SteadyClock::time_point now) {
  std::lock_guard<std::mutex> lk(mu_);
  if (waiting_++ == 0) waiting_since_ = now;
  s_.waits += 1;
}

void StragglerMeter::end_wait(SteadyClock::time_point now) {
  std::lock_guard<std::mutex> lk(mu_);
  if (--waiting_ == 0) s_.blocked_s += std::chrono::duration<double>(now - waiting_since_).count();
}

void StragglerMeter::add_comm(double s) {
  std::lock_guard<std::mutex> lk(mu_);
  s_.comm_s += s;
}

void StragglerMeter::add_work(double data_s, double compute_s) {
  std::lock_guard<std::mutex> lk(mu_);
  s_.data_s += data_s;
  s_.compute_s += compute_s;
  s_.steps += 1;
}

StragglerSample StragglerMeter::take(SteadyClock::time_point now) {
  std::lock_guard<std::mutex> lk(mu_);
  StragglerSample out = s_;
  out.elapsed_s = std::chrono::duration<double>(now - since_).count();
  if (waiting_ > 0) {  // a wait across the exchange: its part so far is this interval's
    out.blocked_s += std::chrono::duration<double>(now - waiting_since_).count();
    waiting_since_ = now;
  }
  s_ = StragglerSample{};
  since_ = now;
  return out;
}

// ---- the exchange ----

namespace {

constexpr std::size_t kFields = 7;
constexpr std::size_t kHostBytes = 64;
constexpr std::size_t kRecordBytes = 128;
static_assert(kFields * sizeof(double) + kHostBytes <= kRecordBytes, "a record holds its fields");

void encode(const StragglerSample& s, std::uint8_t* out) {
  std::memset(out, 0, kRecordBytes);
  const double f[kFields] = {s.elapsed_s, s.blocked_s, s.waits, s.comm_s,
                             s.data_s,    s.compute_s, s.steps};
  std::memcpy(out, f, sizeof f);
  std::memcpy(out + sizeof f, s.host.data(), std::min(s.host.size(), kHostBytes - 1));
}

StragglerSample decode(const std::uint8_t* in) {
  double f[kFields];
  std::memcpy(f, in, sizeof f);
  StragglerSample s;
  s.elapsed_s = f[0];
  s.blocked_s = f[1];
  s.waits = f[2];
  s.comm_s = f[3];
  s.data_s = f[4];
  s.compute_s = f[5];
  s.steps = f[6];
  const char* host = reinterpret_cast<const char*>(in + sizeof f);
  s.host.assign(host, strnlen(host, kHostBytes - 1));
  return s;
}

}  // namespace

std::vector<StragglerSample> exchange_straggler_samples(comm::Communicator& comm,
                                                        const StragglerSample& mine) {
  std::vector<std::uint8_t> in(kRecordBytes),
      out(kRecordBytes * static_cast<std::size_t>(comm.size()));
  encode(mine, in.data());
  comm::AllgatherOptions o;
  o.input = in.data();
  o.output = out.data();
  o.count = kRecordBytes;
  o.dtype = comm::DataType::kUInt8;
  comm::allgather(comm, o);
  std::vector<StragglerSample> all;
  for (int r = 0; r < comm.size(); ++r) all.push_back(decode(out.data() + kRecordBytes * r));
  return all;
}

// ---- the engine's part ----

StragglerWatch::StragglerWatch(const StragglerOptions& options, int rank, int size,
                               std::string host, Logger logger)
    : enabled_(options.window_s > 0 && size > 1),
      options_(options),
      rank_(rank),
      host_(std::move(host)),
      logger_(std::move(logger)),
      detector_(options, size) {}

void StragglerWatch::after_round(comm::Communicator& comm) {
  if (!enabled_ || --rounds_left_ > 0) return;
  StragglerSample mine = meter_->take(SteadyClock::now());
  mine.host = host_;
  const auto all = exchange_straggler_samples(comm, mine);
  for (const auto& c : detector_.add(all)) {
    if (rank_ != 0) continue;
    if (c.named) {
      logger_.warn("straggler", c.line);
    } else {
      logger_.info("straggler", c.line);
    }
  }
  {
    std::lock_guard<std::mutex> lk(mu_);
    status_ = detector_.ranks();
  }
  // The next exchange about every window / 10 s: the rounds to it, from the
  // exchanged figures only, so every rank counts the same.
  double longest = 0;
  for (const auto& s : all) longest = std::max(longest, s.elapsed_s);
  const double target = std::max(0.5, options_.window_s / 10);
  const double scaled = static_cast<double>(every_) * target / std::max(longest, 1e-3);
  every_ = std::clamp<std::int64_t>(std::llround(scaled), std::max<std::int64_t>(2, every_ / 4),
                                    std::min<std::int64_t>(1 << 20, every_ * 4));
  rounds_left_ = every_;
}

std::vector<StragglerRank> StragglerWatch::status() const {
  std::lock_guard<std::mutex> lk(mu_);
  return status_;
}

}  // namespace hpct::engine
