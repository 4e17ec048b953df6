#include "launch/elastic_supervisor.h"

#include <poll.h>
#include <signal.h>
#include <sys/signalfd.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <deque>
#include <map>
#include <optional>
#include <set>
#include <sstream>

#include "core/error.h"
#include "launch/child_process.h"
#include "launch/elastic_protocol.h"
#include "net/socket.h"

namespace hpct::launch {

namespace proto = elastic;

std::vector<HostEntry> parse_discovery_output(const std::string& text) {
  std::vector<HostEntry> out;
  std::istringstream in(text);
  std::string line;
  for (int n = 1; std::getline(in, line); ++n) {
    auto hash = line.find('#');
    if (hash != std::string::npos) line.resize(hash);
    auto b = line.find_first_not_of(" \t\r");
    if (b == std::string::npos) continue;
    line = line.substr(b, line.find_last_not_of(" \t\r") + 1 - b);
    HostEntry h;
    h.origin = "discovery line " + std::to_string(n);
    auto colon = line.rfind(':');
    h.name = line.substr(0, colon);
    if (colon != std::string::npos) {
      const std::string slots = line.substr(colon + 1);
      char* end = nullptr;
      long v = std::strtol(slots.c_str(), &end, 10);
      if (slots.empty() || *end != '\0' || v < 1 || v > 4096) {
        throw_invalid_argument("host discovery script, line " + std::to_string(n) + " '" + line +
                               "': expected host:slots with slots a positive number");
      }
      h.slots = static_cast<int>(v);
    }
    if (h.name.empty() || h.name.find_first_of(" \t,") != std::string::npos) {
      throw_invalid_argument("host discovery script, line " + std::to_string(n) + " '" + line +
                             "': expected host:slots");
    }
    out.push_back(h);
  }
  return out;
}

namespace {

// The first generation waits at most this long, once --min-np workers are
// ready, for the others still starting.
constexpr Millis kStartGrace{5000};

double seconds(SteadyClock::duration d) { return std::chrono::duration<double>(d).count(); }

std::string fmt_s(double s) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f s", s);
  return buf;
}

std::string describe_status(int status) {
  if (WIFSIGNALED(status)) return "was killed by signal " + std::to_string(WTERMSIG(status));
  return "exited with code " + std::to_string(WEXITSTATUS(status));
}

// Runs the discovery script with a bound; its stdout, or Io/Timeout.
std::string run_discovery(const std::string& script, Millis timeout) {
  ChildOptions o;
  o.argv = {"/bin/sh", "-c", script};
  o.pipe_stdin = false;
  o.death_signal = SIGKILL;
  Child c = start_child(o);
  std::string out, err;
  const Deadline deadline(timeout);
  bool out_open = true, err_open = true;
  int status = 0;
  bool exited = false;
  while (out_open || err_open || !exited) {
    if (deadline.expired()) {
      ::kill(-c.pid, SIGKILL);
      ::waitpid(c.pid, &status, 0);
      throw_timeout("host discovery script '" + script + "' did not finish within " +
                    std::to_string(timeout.count()) + " ms");
    }
    pollfd fds[2];
    int n = 0;
    if (out_open) fds[n++] = {c.stdout_fd.get(), POLLIN, 0};
    if (err_open) fds[n++] = {c.stderr_fd.get(), POLLIN, 0};
    if (n > 0)
      ::poll(fds, static_cast<nfds_t>(n), 20);
    else
      ::usleep(5000);
    char buf[4096];
    for (auto [fd, open, sink] :
         {std::tuple<int, bool*, std::string*>{c.stdout_fd.get(), &out_open, &out},
          std::tuple<int, bool*, std::string*>{c.stderr_fd.get(), &err_open, &err}}) {
      while (*open) {
        ssize_t r = ::read(fd, buf, sizeof buf);
        if (r > 0) {
          sink->append(buf, static_cast<size_t>(r));
          if (sink->size() > (1u << 20))
            throw_invalid_argument("host discovery script printed more than 1 MiB");
          continue;
        }
        if (r == 0) *open = false;
        break;
      }
    }
    if (!exited) exited = reap(c.pid, &status);
  }
  ::kill(-c.pid, SIGKILL);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    std::string first = err.substr(0, err.find('\n'));
    throw Error(ErrorCode::kIo, "host discovery script '" + script + "' " +
                                    describe_status(status) + (first.empty() ? "" : ": " + first));
  }
  return out;
}

}  // namespace

std::vector<HostEntry> discover_hosts(const std::string& script, Millis timeout) {
  return parse_discovery_output(run_discovery(script, timeout));
}

struct ElasticSupervisor::Impl {
  enum class Phase { kStarting, kReady, kMember, kLeaving, kDropping, kGone };

  struct Worker {
    int id = 0;
    std::string host;
    Child child;
    LineSplitter out_lines, err_lines;
    bool out_open = true, err_open = true;
    bool exited = false;
    int status = 0;
    SteadyClock::time_point exited_at{};
    SteadyClock::time_point started_at{};
    SteadyClock::time_point kill_at{};
    Phase phase = Phase::kStarting;
    bool ended = false;  // its X record came
    RankEnd end;
    bool done = false;  // it finished training
    std::int64_t joined_gen = -1;
    std::deque<std::string> tail;  // non-record lines (ssh's)
    bool finished() const {
      return exited && ((!out_open && !err_open) || SteadyClock::now() - exited_at > Millis(1000));
    }
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

  Impl(ElasticOptions options, RankSpec b, PlanWorker p, OutputMux& out, Logger l,
       std::shared_ptr<store::Store> s)
      : o(std::move(options)),
        base(std::move(b)),
        plan_worker(std::move(p)),
        output(out),
        logger(std::move(l)),
        raw_store(std::move(s)) {}

  int alive_count() const {
    int n = 0;
    for (const auto& [id, w] : workers) n += w->alive() ? 1 : 0;
    return n;
  }

  std::string who(const Worker& w) const {
    std::string r = "worker " + std::to_string(w.id);
    if (gen >= 0 && (w.phase == Phase::kMember || w.phase == Phase::kLeaving)) {
      if (const auto* m = generations.at(gen).find(w.id))
        r += " (rank " + std::to_string(m->rank) + ")";
    }
    return r + " on " + w.host;
  }

  void start_worker(const std::string& host) {
    auto w = std::make_unique<Worker>();
    w->id = output.add_rank(host);
    w->host = host;
    ProcessPlan plan = plan_worker(w->id, host);
    RankSpec spec = base;
    // The wrapper's records carry the worker id as their rank; the spec's
    // table must reach it (rank < size). HPCT_RANK/HPCT_SIZE mean nothing
    // to an elastic worker: its rank comes with each generation.
    spec.rank = w->id;
    spec.size = w->id + 1;
    RankPlacement place;
    place.rank = 0;
    place.host = host;
    spec.placement.assign(static_cast<size_t>(w->id) + 1, place);
    spec.env["HPCT_ELASTIC_ID"] = std::to_string(w->id);
    spec.restart = restart;
    ChildOptions co;
    co.argv = plan.argv;
    co.death_signal = SIGTERM;
    try {
      w->child = start_child(co);
    } catch (const Error& e) {
      output.launcher_line("elastic: cannot start a worker on " + host + ": " + e.what());
      lost.push_back({host, std::string("could not start a worker: ") + e.what()});
      blacklist[host] = SteadyClock::now() + o.blacklist_cooldown;
      return;
    }
    if (!net::try_write_all(w->child.stdin_fd.get(), encode_spec(spec) + "\n")) w->child.stdin_fd.reset();
    w->started_at = SteadyClock::now();
    logger.debug("launch", "elastic: started worker " + std::to_string(w->id) + " on " + host +
                               " via " + plan.via);
    workers[w->id] = std::move(w);
  }

  void drop(Worker& w, const std::string& why) {
    if (!w.alive()) return;
    const bool was_member = w.phase == Phase::kMember || w.phase == Phase::kLeaving;
    output.launcher_line("elastic: " + who(w) + " is lost: " + why);
    lost.push_back({w.host, who(w) + ": " + why});
    if (was_member) pending_left.push_back(who(w) + " (" + why + ")");
    if (o.blacklist_cooldown.count() > 0) {
      blacklist[w.host] = SteadyClock::now() + o.blacklist_cooldown;
      output.launcher_line("elastic: host " + w.host + " blacklisted for " +
                           fmt_s(o.blacklist_cooldown.count() / 1000.0));
    }
    w.phase = Phase::kDropping;
    w.child.stdin_fd.reset();
    if (!w.exited) ::kill(-w.child.pid, SIGTERM);
    w.kill_at = SteadyClock::now() + o.grace;
    if (!change_open) change_at = SteadyClock::now();
  }

  void handle_line(Worker& w, bool is_err, const std::string& line) {
    auto rec = parse_record(line);
    if (!rec || rec->rank != w.id) {
      output.spawner_line(w.host, is_err, line);
      w.tail.push_back(line);
      if (w.tail.size() > 10) w.tail.pop_front();
      return;
    }
    switch (rec->kind) {
      case RecordKind::kStdout:
        output.rank_line(w.id, false, rec->payload);
        break;
      case RecordKind::kStderr:
        output.rank_line(w.id, true, rec->payload);
        break;
      case RecordKind::kStarted:
        break;
      case RecordKind::kExit:
        w.ended = true;
        w.end = parse_rank_end(rec->payload);
        break;
    }
  }

  void drain(Worker& w, bool is_err) {
    int fd = is_err ? w.child.stderr_fd.get() : w.child.stdout_fd.get();
    bool& open = is_err ? w.err_open : w.out_open;
    LineSplitter& split = is_err ? w.err_lines : w.out_lines;
    auto on_line = [&](const std::string& l) { handle_line(w, is_err, l); };
    char buf[65536];
    for (int i = 0; i < 16 && open; ++i) {
      ssize_t n = ::read(fd, buf, sizeof buf);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) return;
      if (n == 0) {
        open = false;
        split.flush(on_line);
        return;
      }
      split.feed(buf, static_cast<size_t>(n), on_line);
    }
  }

  void discover(SteadyClock::time_point now) {
    if (now < next_discovery) return;
    next_discovery = now + o.discovery_interval;
    if (o.discovery_script.empty()) {
      discovered = o.hosts;
      return;
    }
    try {
      discovered = discover_hosts(o.discovery_script, o.discovery_timeout);
      discovery_warned = false;
    } catch (const Error& e) {
      if (!discovery_warned)
        output.launcher_line(std::string("elastic: ") + e.what() + "; keeping the last host list");
      discovery_warned = true;
    }
  }

  bool host_listed(const std::string& host) const {
    return std::any_of(discovered.begin(), discovered.end(),
                       [&](const HostEntry& h) { return h.name == host; });
  }

  void start_missing(SteadyClock::time_point now) {
    for (auto it = blacklist.begin(); it != blacklist.end();) {
      if (it->second <= now) {
        output.launcher_line("elastic: host " + it->first + " leaves the blacklist");
        it = blacklist.erase(it);
      } else {
        ++it;
      }
    }
    for (const auto& h : discovered) {
      if (blacklist.count(h.name)) continue;
      int on_host = 0;
      for (const auto& [id, w] : workers) {
        if (w->alive() && w->phase != Phase::kLeaving && w->host == h.name) ++on_host;
      }
      while (on_host < h.slots && alive_count() < o.max_np) {
        start_worker(h.name);
        ++on_host;
        if (blacklist.count(h.name)) break;  // it could not be started
      }
    }
  }

  void read_reports() {
    std::int64_t n = store->add(proto::kReportCounterKey, 0);
    for (; reports_seen < n; ++reports_seen) {
      proto::FailureReport r;
      try {
        r = proto::decode_report(store->get(proto::report_key(reports_seen + 1), Millis(2000)));
      } catch (const Error& e) {
        output.launcher_line(std::string("elastic: unreadable failure report: ") + e.what());
        continue;
      }
      auto g = generations.find(r.gen);
      if (g == generations.end()) continue;
      bool blamed_someone = false;
      for (int rank : r.blamed) {
        if (rank < 0 || rank >= static_cast<int>(g->second.members.size())) continue;
        auto w = workers.find(static_cast<int>(g->second.members[static_cast<size_t>(rank)].id));
        if (w == workers.end()) continue;
        blamed_someone = true;
        if (w->second->alive()) {
          drop(*w->second, "rank " + std::to_string(r.rank) + " of generation " +
                               std::to_string(r.gen) + " reports it failed");
        }
      }
      if (!blamed_someone && r.gen == gen && !republish) {
        // A failure that names no one: give the culprit's end a moment to
        // show, then form the members' world again.
        republish = true;
        republish_at = SteadyClock::now() + Millis(1000);
        if (!change_open) change_at = SteadyClock::now();
      }
    }
  }

  void publish(const std::string& reason, const std::vector<std::string>& joined) {
    std::vector<proto::Candidate> cands;
    for (const auto& [id, w] : workers) {
      if (w->phase == Phase::kMember || w->phase == Phase::kReady) {
        cands.push_back({id, w->host, w->phase == Phase::kMember ? w->joined_gen : gen + 1});
      }
    }
    const int old_size = gen >= 0 ? static_cast<int>(generations[gen].members.size()) : 0;
    proto::Generation g;
    g.gen = gen + 1;
    g.reason = reason;
    g.members = proto::assign_ranks(cands);
    store->set(proto::generation_key(g.gen), proto::encode_generation(g));
    store->set(proto::kCurrentKey, std::to_string(g.gen));
    for (const auto& m : g.members) {
      Worker& w = *workers.at(static_cast<int>(m.id));
      if (w.phase == Phase::kReady) {
        w.phase = Phase::kMember;
        w.joined_gen = g.gen;
      }
    }
    gen = g.gen;
    generations[gen] = g;
    std::string line = "elastic: generation " + std::to_string(gen) + ": size " +
                       std::to_string(old_size) + " -> " + std::to_string(g.members.size());
    if (!pending_left.empty()) {
      line += "; left:";
      for (size_t i = 0; i < pending_left.size(); ++i) line += (i ? ", " : " ") + pending_left[i];
    }
    if (!joined.empty()) {
      line += "; joined:";
      for (size_t i = 0; i < joined.size(); ++i) line += (i ? ", " : " ") + joined[i];
    }
    line += " (" + reason + ")";
    if (old_size > 0)
      line += ", decided " + fmt_s(seconds(SteadyClock::now() - change_at)) + " after the change";
    output.launcher_line(line);
    pending_left.clear();
    republish = false;
    change_open = true;
  }

  void check_arrivals() {
    if (!change_open || gen < 0) return;
    const auto& g = generations[gen];
    std::vector<std::string> keys;
    for (const auto& m : g.members)
      keys.push_back(proto::world_prefix(gen) + "/" + proto::arrived_key(m.rank));
    if (store->check(keys)) {
      change_open = false;
      if (gen > 0) {
        output.launcher_line("elastic: generation " + std::to_string(gen) + " formed: all " +
                             std::to_string(g.members.size()) + " members arrived " +
                             fmt_s(seconds(SteadyClock::now() - change_at)) + " after the change");
      }
    }
  }

  std::string lost_hosts() const {
    std::string s;
    std::set<std::string> seen;
    for (const auto& l : lost) {
      if (!seen.insert(l.host).second) continue;
      s += (s.empty() ? "" : ", ") + l.host;
    }
    std::string detail;
    for (const auto& l : lost) detail += "; " + l.what;
    return (s.empty() ? "none" : s) + detail;
  }

  AttemptResult run(int attempt);
};

AttemptResult ElasticSupervisor::Impl::run(int attempt) {
  restart = attempt;
  store = std::make_shared<store::PrefixStore>(
      base.job_id + "/restart" + std::to_string(attempt) + "/" + proto::kPrefix, raw_store);
  workers.clear();
  generations.clear();
  gen = -1;
  quorum_since.reset();
  reports_seen = 0;
  lost.clear();
  pending_left.clear();
  blacklist.clear();
  next_discovery = SteadyClock::now();
  AttemptResult result;
  bool stopping = false;
  SteadyClock::time_point stop_started{}, kill_at{}, give_up_at{};
  const auto attempt_start = SteadyClock::now();

  auto begin_stop = [&](bool ok, int code, const std::string& summary) {
    if (stopping) return;
    stopping = true;
    result.ok = ok;
    result.exit_code = code;
    result.summary = summary;
    stop_started = SteadyClock::now();
    kill_at = stop_started + o.grace + Millis(2000);
    give_up_at = kill_at + Millis(5000);
    for (auto& [id, w] : workers) {
      w->child.stdin_fd.reset();
      if (!w->exited) ::kill(-w->child.pid, SIGTERM);
    }
  };

  while (true) {
    std::vector<pollfd> fds;
    for (auto& [id, w] : workers) {
      if (w->out_open) fds.push_back({w->child.stdout_fd.get(), POLLIN, 0});
      if (w->err_open) fds.push_back({w->child.stderr_fd.get(), POLLIN, 0});
    }
    if (o.signal_fd >= 0) fds.push_back({o.signal_fd, POLLIN, 0});
    int rc = ::poll(fds.data(), fds.size(), 50);
    if (rc < 0 && errno != EINTR) throw_io("poll", errno);
    if (o.signal_fd >= 0 && (fds.back().revents & POLLIN)) {
      signalfd_siginfo si;
      if (::read(o.signal_fd, &si, sizeof si) == sizeof si && result.interrupted_by == 0) {
        result.interrupted_by = static_cast<int>(si.ssi_signo);
        output.launcher_line(std::string("got ") + ::strsignal(static_cast<int>(si.ssi_signo)) +
                             "; stopping every worker");
        begin_stop(false, 128 + static_cast<int>(si.ssi_signo),
                   std::string("interrupted by ") + ::strsignal(static_cast<int>(si.ssi_signo)));
      }
    }
    const auto now = SteadyClock::now();
    for (auto& [id, w] : workers) {
      if (w->out_open) drain(*w, false);
      if (w->err_open) drain(*w, true);
      if (!w->exited && reap(w->child.pid, &w->status)) {
        w->exited = true;
        w->exited_at = now;
        w->child.stdin_fd.reset();
      }
      if (w->phase == Phase::kDropping && !w->exited && now >= w->kill_at)
        ::kill(-w->child.pid, SIGKILL);
    }

    if (stopping) {
      bool all = std::all_of(workers.begin(), workers.end(),
                             [](const auto& kv) { return kv.second->finished(); });
      if (all) break;
      if (now >= kill_at) {
        for (auto& [id, w] : workers) {
          if (!w->exited) ::kill(-w->child.pid, SIGKILL);
        }
      }
      if (now >= give_up_at) {
        output.launcher_line("some workers did not end after SIGKILL; giving up on them");
        break;
      }
      continue;
    }

    // Ends: finished, removed, or lost.
    for (auto& [id, w] : workers) {
      if (!w->finished() || w->phase == Phase::kGone) continue;
      if (!w->done && w->phase != Phase::kDropping) w->done = store->check({proto::done_key(id)});
      if (w->phase == Phase::kDropping) {
        w->phase = Phase::kGone;
      } else if (w->done && w->ended && w->end.ok()) {
        w->phase = Phase::kGone;
      } else if (w->phase == Phase::kLeaving && w->ended && w->end.ok()) {
        output.launcher_line("elastic: " + who(*w) + " left the job");
        w->phase = Phase::kGone;
      } else {
        std::string why =
            w->ended ? w->end.describe()
                     : (w->child.pid > 0 ? "its session " + describe_status(w->status) : "ended");
        if (!w->ended && !w->tail.empty()) why += " (" + w->tail.back() + ")";
        drop(*w, why);
        w->phase = Phase::kGone;
      }
    }

    // Did the job finish? Every member of the newest generation has ended
    // after finishing.
    if (gen >= 0) {
      bool any_done = false, all_members_gone = true;
      for (const auto& m : generations[gen].members) {
        const Worker& w = *workers.at(static_cast<int>(m.id));
        any_done = any_done || w.done;
        all_members_gone = all_members_gone && w.phase == Phase::kGone;
      }
      if (any_done && all_members_gone) {
        output.launcher_line("elastic: the job finished with " +
                             std::to_string(generations[gen].members.size()) +
                             " workers in generation " + std::to_string(gen) + " after " +
                             fmt_s(seconds(now - attempt_start)));
        begin_stop(true, 0, "");
        continue;
      }
      if (any_done) continue;  // finishing: no more changes
    }

    try {
      read_reports();
    } catch (const Error& e) {
      output.launcher_line(std::string("elastic: cannot read failure reports: ") + e.what());
    }
    discover(now);
    start_missing(now);

    std::vector<std::string> joined;
    bool starting = false;
    for (auto& [id, w] : workers) {
      if (w->phase == Phase::kStarting) {
        if (store->check({proto::ready_key(id)})) {
          w->phase = Phase::kReady;
        } else if (now - w->started_at > o.start_timeout) {
          drop(*w,
               "not ready within the start timeout of " + fmt_s(o.start_timeout.count() / 1000.0));
        } else {
          starting = true;
        }
      }
      if (w->phase == Phase::kReady)
        joined.push_back("worker " + std::to_string(id) + " on " + w->host);
    }
    // Members on hosts discovery no longer lists leave at their next commit.
    std::vector<std::string> removed;
    for (auto& [id, w] : workers) {
      if (w->phase == Phase::kMember && !host_listed(w->host) && !o.discovery_script.empty()) {
        removed.push_back(who(*w));
        w->phase = Phase::kLeaving;
      }
    }
    for (const auto& r : removed) pending_left.push_back(r + " (its host left discovery)");
    if (!removed.empty() && !change_open) change_at = now;
    int members = 0;
    for (const auto& [id, w] : workers)
      members += (w->phase == Phase::kMember || w->phase == Phase::kReady) ? 1 : 0;
    if (gen < 0 && members >= o.min_np && starting && !quorum_since) quorum_since = now;
    const bool start_now = !starting || (quorum_since && now - *quorum_since >= kStartGrace);
    const bool change =
        gen < 0 ? (start_now && !joined.empty())
                : (!pending_left.empty() || !joined.empty() || (republish && now >= republish_at));
    if (change && members >= o.min_np) {
      below = false;
      std::string reason = gen < 0                 ? "start"
                           : !pending_left.empty() ? (removed.empty() ? "failure" : "scale-down")
                           : republish             ? "re-form"
                                                   : "scale-up";
      if (gen < 0)
        change_at = attempt_start;
      else if (!change_open && reason == "scale-up")
        change_at = now;
      publish(reason, joined);
    } else if (members < o.min_np) {
      // Also before the first generation: workers that keep failing to
      // start must not keep the launcher waiting forever.
      if (!below) {
        below = true;
        below_since = now;
        if (gen >= 0 || !starting) {
          output.launcher_line("elastic: " + std::to_string(members) + " workers, below --min-np " +
                               std::to_string(o.min_np) + "; waiting up to " +
                               fmt_s(o.elastic_timeout.count() / 1000.0) + " for hosts");
        }
      } else if (now - below_since > o.elastic_timeout + (gen < 0 ? o.start_timeout : Millis(0))) {
        begin_stop(false, error_exit_code(ErrorCode::kPeerFailure),
                   "elastic job below --min-np " + std::to_string(o.min_np) + " (" +
                       std::to_string(members) + " workers) for " +
                       fmt_s(o.elastic_timeout.count() / 1000.0) +
                       " (HPCT_ELASTIC_TIMEOUT_S); lost hosts: " + lost_hosts());
        continue;
      }
    } else {
      below = false;
    }
    try {
      check_arrivals();
    } catch (const Error&) {
    }
  }
  if (stopping && !result.ok)
    result.stop_time = std::chrono::duration_cast<Millis>(SteadyClock::now() - stop_started);
  for (auto& [id, w] : workers) {
    if (w->child.pid > 0) ::kill(-w->child.pid, SIGKILL);
  }
  return result;
}

ElasticSupervisor::ElasticSupervisor(ElasticOptions options, RankSpec base_spec,
                                     PlanWorker plan_worker, OutputMux& output, Logger logger,
                                     std::shared_ptr<store::Store> store)
    : impl_(std::make_unique<Impl>(std::move(options), std::move(base_spec), std::move(plan_worker),
                                   output, std::move(logger), std::move(store))) {}

ElasticSupervisor::~ElasticSupervisor() = default;

AttemptResult ElasticSupervisor::run(int restart) { return impl_->run(restart); }

}  // namespace hpct::launch
