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
#include <set>
#include <sstream>

#include "core/error.h"
#include "launch/child_process.h"
#include "launch/elastic_protocol.h"
#include "launch/elastic_supervisor_impl.h"
#include "net/socket.h"

namespace hpct::launch {

void ElasticSupervisor::Impl::start_worker(const std::string& host) {
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

void ElasticSupervisor::Impl::drop(Worker& w, const std::string& why) {
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

void ElasticSupervisor::Impl::handle_line(Worker& w, bool is_err, const std::string& line) {
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

void ElasticSupervisor::Impl::drain(Worker& w, bool is_err) {
  w.drain(is_err, [&](const std::string& l) { handle_line(w, is_err, l); });
}

void ElasticSupervisor::Impl::discover(SteadyClock::time_point now) {
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

bool ElasticSupervisor::Impl::host_listed(const std::string& host) const {
  return std::any_of(discovered.begin(), discovered.end(),
                     [&](const HostEntry& h) { return h.name == host; });
}

void ElasticSupervisor::Impl::start_missing(SteadyClock::time_point now) {
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

void ElasticSupervisor::Impl::begin_stop(bool ok, int code, const std::string& summary) {
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
}

SteadyClock::time_point ElasticSupervisor::Impl::poll_workers() {
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
  return now;
}

bool ElasticSupervisor::Impl::stop_done(SteadyClock::time_point now) {
  bool all = std::all_of(workers.begin(), workers.end(),
                         [](const auto& kv) { return kv.second->finished(); });
  if (all) return true;
  if (now >= kill_at) {
    for (auto& [id, w] : workers) {
      if (!w->exited) ::kill(-w->child.pid, SIGKILL);
    }
  }
  if (now >= give_up_at) {
    output.launcher_line("some workers did not end after SIGKILL; giving up on them");
    return true;
  }
  return false;
}


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
  result = AttemptResult{};
  stopping = false;
  attempt_start = SteadyClock::now();

  while (true) {
    const auto now = poll_workers();
    if (stopping) {
      if (stop_done(now)) break;
      continue;
    }
    settle_ends();
    if (finishing(now)) continue;
    try {
      read_reports();
    } catch (const Error& e) {
      output.launcher_line(std::string("elastic: cannot read failure reports: ") + e.what());
    }
    discover(now);
    start_missing(now);
    if (!update_membership(now)) continue;
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
