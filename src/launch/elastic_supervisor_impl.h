// The elastic launcher's state and its parts (elastic_supervisor.h):
// internal to launch/. The workers' lives (start, output, drops, discovery,
// the stop) are in elastic_supervisor.cc; the membership (failure reports,
// generations, arrivals, ends) in elastic_membership.cc.
#pragma once

#include <cstdint>
#include <cstdio>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "launch/child_process.h"
#include "launch/elastic_protocol.h"
#include "launch/elastic_supervisor.h"

namespace hpct::launch {

namespace proto = elastic;

// The first generation waits at most this long, once --min-np workers are
// ready, for the others still starting.
inline constexpr Millis kStartGrace{5000};

inline double seconds(SteadyClock::duration d) { return std::chrono::duration<double>(d).count(); }

inline std::string fmt_s(double s) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f s", s);
  return buf;
}

struct ElasticSupervisor::Impl {
  enum class Phase { kStarting, kReady, kMember, kLeaving, kDropping, kGone };

  struct Worker : WatchedChild {
    int id = 0;
    std::string host;
    SteadyClock::time_point started_at{};
    SteadyClock::time_point kill_at{};
    Phase phase = Phase::kStarting;
    bool ended = false;  // its X record came
    RankEnd end;
    bool done = false;  // it finished training
    std::int64_t joined_gen = -1;
    std::deque<std::string> tail;  // non-record lines (ssh's)
    bool alive() const { return phase != Phase::kDropping && phase != Phase::kGone; }
  };

  struct Lost {
    std::string host;
    std::string what;
  };

  ElasticOptions o;
  RankSpec base;
  PlanWorker plan_worker;
  OutputMux& output;
  Logger logger;
  std::shared_ptr<store::Store> raw_store;
  std::shared_ptr<store::Store> store;  // this attempt's "<job>/restart<n>/elastic"

  std::map<int, std::unique_ptr<Worker>> workers;
  std::map<std::string, SteadyClock::time_point> blacklist;  // host -> until
  std::vector<HostEntry> discovered;
  SteadyClock::time_point next_discovery{};
  bool discovery_warned = false;
  std::int64_t gen = -1;
  std::map<std::int64_t, proto::Generation> generations;
  std::int64_t reports_seen = 0;
  std::vector<Lost> lost;                  // every loss of the attempt, for the final message
  std::vector<std::string> pending_left;   // losses and removals not yet in a generation
  bool republish = false;                  // a failure with no one to blame: form the world again
  SteadyClock::time_point republish_at{};  // after a moment for the culprit's end to show
  SteadyClock::time_point change_at{};
  bool change_open = false;  // a published change whose members have not all arrived
  SteadyClock::time_point below_since{};
  bool below = false;
  // Before the first generation: since when --min-np workers are ready
  // while others still start (a host whose workers keep failing to start
  // must not hold the job back; it joins later, at a commit).
  std::optional<SteadyClock::time_point> quorum_since;
  int restart = 0;

  // This attempt (run).
  AttemptResult result;
  bool stopping = false;
  SteadyClock::time_point stop_started{}, kill_at{}, give_up_at{};
  SteadyClock::time_point attempt_start{};

  Impl(ElasticOptions options, RankSpec b, PlanWorker p, OutputMux& out, Logger l,
       std::shared_ptr<store::Store> s)
      : o(std::move(options)),
        base(std::move(b)),
        plan_worker(std::move(p)),
        output(out),
        logger(std::move(l)),
        raw_store(std::move(s)) {}

  // Workers (elastic_supervisor.cc).
  int alive_count() const;
  std::string who(const Worker& w) const;
  void start_worker(const std::string& host);
  void drop(Worker& w, const std::string& why);
  void handle_line(Worker& w, bool is_err, const std::string& line);
  void drain(Worker& w, bool is_err);
  void discover(SteadyClock::time_point now);
  bool host_listed(const std::string& host) const;
  void start_missing(SteadyClock::time_point now);
  void read_reports();
  void publish(const std::string& reason, const std::vector<std::string>& joined);
  void check_arrivals();
  std::string lost_hosts() const;

  // The attempt's stop: SIGTERM to every worker, SIGKILL after the grace
  // period, giving up 5 s later.
  void begin_stop(bool ok, int code, const std::string& summary);

  // Reads what arrived (lines, a signal, ended workers); returns the time
  // after the signal.
  SteadyClock::time_point poll_workers();

  // While stopping: true when every worker has ended or is given up on.
  bool stop_done(SteadyClock::time_point now);
  void settle_ends();

  // True when the job finished or is finishing (no more changes).
  bool finishing(SteadyClock::time_point now);

  // New, ready and removed workers, and the generation they make; false
  // when the job stopped below --min-np.
  bool update_membership(SteadyClock::time_point now);
  AttemptResult run(int attempt);
};


}  // namespace hpct::launch
