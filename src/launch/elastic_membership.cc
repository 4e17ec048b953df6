// The elastic launcher's membership (elastic_supervisor_impl.h): failure
// reports, generations and their publication, the members' arrival, the
// ends of workers and of the job, and the changes a pass decides.
#include <algorithm>
#include <set>
#include <sstream>

#include "core/error.h"
#include "launch/elastic_supervisor_impl.h"

namespace hpct::launch {

int ElasticSupervisor::Impl::alive_count() const {
  int n = 0;
  for (const auto& [id, w] : workers) n += w->alive() ? 1 : 0;
  return n;
}

std::string ElasticSupervisor::Impl::who(const Worker& w) const {
  std::string r = "worker " + std::to_string(w.id);
  if (gen >= 0 && (w.phase == Phase::kMember || w.phase == Phase::kLeaving)) {
    if (const auto* m = generations.at(gen).find(w.id))
      r += " (rank " + std::to_string(m->rank) + ")";
  }
  return r + " on " + w.host;
}

void ElasticSupervisor::Impl::read_reports() {
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

void ElasticSupervisor::Impl::publish(const std::string& reason, const std::vector<std::string>& joined) {
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

void ElasticSupervisor::Impl::check_arrivals() {
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

std::string ElasticSupervisor::Impl::lost_hosts() const {
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

void ElasticSupervisor::Impl::settle_ends() {
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
}

bool ElasticSupervisor::Impl::finishing(SteadyClock::time_point now) {
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
      return true;
    }
    if (any_done) return true;  // finishing: no more changes
  }
  return false;
}

bool ElasticSupervisor::Impl::update_membership(SteadyClock::time_point now) {
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
      return false;
    }
  } else {
    below = false;
  }
  return true;
}

}  // namespace hpct::launch
