#include "launch/supervisor.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "core/error.h"
#include "launch/child_process.h"
#include "net/socket.h"

namespace hpct::launch {

struct Supervisor::Proc : WatchedChild {
  ProcessPlan plan;
  std::deque<std::string> tail;  // its own (non-record) lines, for messages
};

struct Supervisor::RankState {
  bool started = false;
  bool ended = false;
  RankEnd end;
  size_t proc = 0;
};

namespace {

void write_spec_file(const std::string& path, const std::string& line) {
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (fd < 0) throw_io("cannot write the rank spec file " + path, errno);
  ::fchmod(fd, 0600);
  bool ok = net::try_write_all(fd, line + "\n");
  ::close(fd);
  if (!ok) throw_io("cannot write the rank spec file " + path, errno);
}

}  // namespace

Supervisor::Supervisor(std::vector<ProcessPlan> plans, RankSpec base_spec, OutputMux& output,
                       SupervisorOptions options, Logger logger)
    : plans_(std::move(plans)),
      base_spec_(std::move(base_spec)),
      output_(output),
      options_(options),
      logger_(std::move(logger)) {}

// One run of the job: its processes and ranks, the first failure and the
// stop it began (SIGTERM to every process, SIGKILL after the grace period,
// giving up 5 s later).
struct Supervisor::Attempt {
  const std::vector<ProcessPlan>& plans_;
  const RankSpec& base_spec_;
  OutputMux& output_;
  const SupervisorOptions& options_;
  const int restart;
  // Parameter servers (launch --servers) are processes size..size+K-1.
  const int size = base_spec_.size + base_spec_.servers;
  std::vector<Proc> procs = std::vector<Proc>(plans_.size());
  std::vector<RankState> ranks = std::vector<RankState>(static_cast<size_t>(size));
  AttemptResult result;
  bool stopping = false;
  SteadyClock::time_point stop_started{}, kill_at{}, give_up_at{};
  SteadyClock::time_point failure_at{};
  bool blamed_signal = false;  // the failure blamed is a rank killed by a signal
  bool spec_files_removed = false;

  Attempt(const std::vector<ProcessPlan>& plans, const RankSpec& base_spec, OutputMux& output,
          const SupervisorOptions& options, int restart_number)
      : plans_(plans), base_spec_(base_spec), output_(output), options_(options), restart(restart_number) {}

  std::string name(int r) const {
    return r >= base_spec_.size ? "parameter server " + std::to_string(r - base_spec_.size)
                                : "rank " + std::to_string(r);
  }

  void begin_stop() {
    if (stopping) return;
    stopping = true;
    stop_started = SteadyClock::now();
    kill_at = stop_started + options_.grace + Millis(2000);
    give_up_at = kill_at + Millis(5000);
    for (auto& p : procs) {
      p.child.stdin_fd.reset();
      if (p.plan.group && p.child.pid > 0 && !p.exited) ::kill(p.child.pid, SIGTERM);
    }
  }

  // A rank killed by a signal from outside (not the SIGTERM of the stop, not
  // a broken pipe) within a second of a first failure that was an exit code:
  // the killed rank is the cause, and the ranks that exited first (a peer
  // that noticed it, a parameter server that lost its partner) are its
  // consequences, so the summary names the killed one.
  bool killed_first(int rank, const RankEnd& end) const {
    return stopping && !blamed_signal && result.failed_rank >= 0 && rank != result.failed_rank &&
           end.signal != 0 && end.signal != SIGTERM && end.signal != SIGPIPE &&
           SteadyClock::now() - failure_at < Millis(1000) && SteadyClock::now() < kill_at;
  }

  void fail(int rank, const std::string& what, int exit_code, const std::deque<std::string>& tail,
            const std::string& tail_from) {
    if (stopping) return;
    blame(rank, what, exit_code, tail, tail_from);
  }

  // Names the failure in the result and stops the attempt (a stop under way
  // goes on: a later blame only names the cause better).
  void blame(int rank, const std::string& what, int exit_code, const std::deque<std::string>& tail,
             const std::string& tail_from) {
    result.tail_from = tail_from;
    result.ok = false;
    result.failed_rank = rank;
    result.summary = what;
    result.exit_code = exit_code;
    result.tail.assign(tail.begin(), tail.end());
    begin_stop();
  }

  // 1. Start every process and hand it the spec.
  void start_all() {
    for (size_t i = 0; i < plans_.size(); ++i) {
      Proc& p = procs[i];
      p.plan = plans_[i];
      for (int r : p.plan.ranks) ranks.at(static_cast<size_t>(r)).proc = i;
      RankSpec spec = base_spec_;
      spec.rank = p.plan.group ? -1 : p.plan.ranks.at(0);
      spec.restart = restart;
      std::string line = encode_spec(spec);
      ChildOptions o;
      o.argv = p.plan.argv;
      o.death_signal = SIGTERM;
      try {
        if (!p.plan.spec_file.empty()) write_spec_file(p.plan.spec_file, line);
        p.child = start_child(o);
      } catch (const Error& e) {
        p.exited = true;
        p.out_open = p.err_open = false;
        for (auto& q : procs) {
          if (q.child.pid > 0) {
            q.child.stdin_fd.reset();
            ::kill(-q.child.pid, SIGKILL);
            int st;
            ::waitpid(q.child.pid, &st, 0);
          }
        }
        throw Error(e.code(), std::string("cannot start the ") +
                                  (p.plan.group ? p.plan.host : "spawner for rank " + std::to_string(p.plan.ranks.at(0)) + " on host " + p.plan.host) +
                                  ": " + e.what());
      }
      if (p.plan.spec_file.empty() && !net::try_write_all(p.child.stdin_fd.get(), line + "\n")) {
        // It died already; its end and its messages arrive through the loop.
        p.child.stdin_fd.reset();
      }
    }
  }

  void handle_line(Proc& p, bool is_err, const std::string& line) {
    auto rec = parse_record(line);
    if (!rec || rec->rank >= size ||
        std::find(p.plan.ranks.begin(), p.plan.ranks.end(), rec->rank) == p.plan.ranks.end()) {
      output_.spawner_line(p.plan.host, is_err, line);
      p.tail.push_back(line);
      if (p.tail.size() > 10) p.tail.pop_front();
      return;
    }
    RankState& r = ranks[static_cast<size_t>(rec->rank)];
    switch (rec->kind) {
      case RecordKind::kStdout: output_.rank_line(rec->rank, false, rec->payload); break;
      case RecordKind::kStderr: output_.rank_line(rec->rank, true, rec->payload); break;
      case RecordKind::kStarted: {
        r.started = true;
        auto sp = rec->payload.find(' ');
        // Group spawners place ranks themselves: take the host the rank reports.
        if (p.plan.group && sp != std::string::npos) output_.set_host(rec->rank, rec->payload.substr(sp + 1));
        break;
      }
      case RecordKind::kExit:
        r.ended = true;
        r.end = parse_rank_end(rec->payload);
        if (!r.end.ok() && (!stopping || killed_first(rec->rank, r.end))) {
          if (!stopping) failure_at = SteadyClock::now();
          blamed_signal = r.end.signal != 0;
          blame(rec->rank, name(rec->rank) + " on host " + output_.host(rec->rank) +
                              " " + r.end.describe(),
               r.end.launcher_exit_code(), output_.stderr_tail(rec->rank),
               name(rec->rank) + "'s stderr");
        }
        break;
    }
  }

  void drain(Proc& p, bool is_err) {
    p.drain(is_err, [&](const std::string& l) { handle_line(p, is_err, l); });
  }

  // 2..5. One pass of the watch: reads what arrived (lines, a signal, ended
  // processes); returns true when everything has ended.
  bool watch_once(const Deadline& start_deadline) {
    std::vector<pollfd> fds;
    for (auto& p : procs) {
      if (p.out_open) fds.push_back({p.child.stdout_fd.get(), POLLIN, 0});
      if (p.err_open) fds.push_back({p.child.stderr_fd.get(), POLLIN, 0});
    }
    if (options_.signal_fd >= 0) fds.push_back({options_.signal_fd, POLLIN, 0});
    int rc = ::poll(fds.data(), fds.size(), 50);
    if (rc < 0 && errno != EINTR) throw_io("poll", errno);
    if (options_.signal_fd >= 0 && (fds.back().revents & POLLIN)) {
      signalfd_siginfo si;
      if (::read(options_.signal_fd, &si, sizeof si) == sizeof si && result.interrupted_by == 0) {
        result.interrupted_by = static_cast<int>(si.ssi_signo);
        output_.launcher_line(std::string("got ") + ::strsignal(static_cast<int>(si.ssi_signo)) +
                              "; stopping every rank");
        fail(-1, std::string("interrupted by ") + ::strsignal(static_cast<int>(si.ssi_signo)),
             128 + static_cast<int>(si.ssi_signo), {}, "");
        failure_at = SteadyClock::now();
      }
    }
    for (auto& p : procs) {
      if (p.out_open) drain(p, false);
      if (p.err_open) drain(p, true);
      if (!p.exited && reap(p.child.pid, &p.status)) {
        p.exited = true;
        p.exited_at = SteadyClock::now();
        p.child.stdin_fd.reset();
      }
    }

    if (!stopping) find_lost_ranks();
    if (!spec_files_removed &&
        std::all_of(ranks.begin(), ranks.end(), [](const RankState& s) { return s.started; })) {
      // Every rank has read the spec: the secret leaves the file system.
      for (auto& p : procs) {
        if (!p.plan.spec_file.empty()) ::unlink(p.plan.spec_file.c_str());
      }
      spec_files_removed = true;
    }
    if (!stopping && start_deadline.expired()) {
      std::string missing;
      int first = -1;
      for (int r = 0; r < size; ++r) {
        if (ranks[static_cast<size_t>(r)].started) continue;
        if (first < 0) first = r;
        if (!missing.empty()) missing += ", ";
        missing += name(r) + " on host " + output_.host(r);
      }
      if (first >= 0) {
        failure_at = SteadyClock::now();
        fail(first, missing + " did not start within the start timeout of " +
                        std::to_string(options_.start_timeout.count() / 1000.0).substr(0, 5) + " s",
             error_exit_code(ErrorCode::kTimeout), procs[ranks[static_cast<size_t>(first)].proc].tail,
             "the spawner of rank " + std::to_string(first));
      }
    }
    bool all_finished = std::all_of(procs.begin(), procs.end(), [](const Proc& p) { return p.finished(); });
    if (!stopping && all_finished) {
      bool all_ok = std::all_of(ranks.begin(), ranks.end(), [](const RankState& s) { return s.ended && s.end.ok(); });
      result.ok = all_ok;
      if (!all_ok) {
        result.summary = "the job ended without every rank reporting success";
        result.exit_code = error_exit_code(ErrorCode::kPeerFailure);
      }
      return true;
    }
    if (stopping) {
      if (all_finished) return true;
      auto now = SteadyClock::now();
      if (now >= kill_at) {
        for (auto& p : procs) {
          if (!p.exited) ::kill(-p.child.pid, SIGKILL);
        }
      }
      if (now >= give_up_at) {
        output_.launcher_line("some spawner processes did not end after SIGKILL; giving up on them");
        return true;
      }
    }
    return false;
  }

  // A spawner process ended but some of its ranks never reported an end.
  void find_lost_ranks() {
    for (auto& p : procs) {
      if (!p.finished()) continue;
      for (int r : p.plan.ranks) {
        const RankState& s = ranks[static_cast<size_t>(r)];
        if (s.ended) continue;
        std::string who = p.plan.via == "ssh"   ? "its ssh session"
                          : p.plan.group          ? p.plan.via
                                                  : "its wrapper process";
        failure_at = SteadyClock::now();
        fail(r, name(r) + " on host " + output_.host(r) +
                    (s.started ? " was lost: " : " did not start: ") + who + " " +
                    describe_status(p.status),
             error_exit_code(ErrorCode::kPeerFailure), p.tail, who);
        break;
      }
      if (stopping) break;
    }
  }
};

AttemptResult Supervisor::run(int restart) {
  Attempt a(plans_, base_spec_, output_, options_, restart);
  a.start_all();
  const Deadline start_deadline(options_.start_timeout);
  while (!a.watch_once(start_deadline)) {
  }
  if (a.stopping) {
    a.result.stop_time = std::chrono::duration_cast<Millis>(SteadyClock::now() - a.failure_at);
  }
  // Nothing a spawner left in its process group outlives the attempt.
  for (auto& p : a.procs) {
    if (p.child.pid > 0) ::kill(-p.child.pid, SIGKILL);
    if (!p.plan.spec_file.empty()) ::unlink(p.plan.spec_file.c_str());
  }
  return a.result;
}

}  // namespace hpct::launch
