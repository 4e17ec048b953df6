#include "doctor/doctor.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <random>
#include <thread>

#include "core/clock.h"
#include "core/error.h"
#include "core/subprocess.h"
#include "doctor/checks.h"
#include "doctor/known_host.h"
#include "doctor/net.h"
#include "doctor/probe_session.h"
#include "launch/spawner.h"

namespace hpct::doctor {
namespace {

std::string random_run_id() {
  std::random_device rd;
  char buf[17];
  std::snprintf(buf, sizeof buf, "%08x%08x", rd(), rd());
  return buf;
}

// Resolves every listed name on worker threads, waiting at most `timeout`
// in all: getaddrinfo cannot be interrupted, so a thread stuck on a dead
// resolver is left behind (detached) holding only its own shared state.
void resolve_all(std::vector<HostOutcome>& hosts, Millis timeout) {
  struct Shared {
    std::mutex mu;
    std::condition_variable cv;
    std::vector<std::vector<std::string>> addrs;  // GUARDED_BY(mu)
    std::vector<std::string> errors;              // GUARDED_BY(mu)
    std::vector<bool> done;                       // GUARDED_BY(mu)
  };
  auto shared = std::make_shared<Shared>();
  size_t n = hosts.size();
  shared->addrs.resize(n);
  shared->errors.resize(n);
  shared->done.assign(n, false);
  for (size_t i = 0; i < n; ++i) {
    std::thread([shared, i, name = hosts[i].name] {
      std::string error;
      auto addrs = resolve_ipv4(name, &error);
      std::lock_guard<std::mutex> lock(shared->mu);
      shared->addrs[i] = std::move(addrs);
      shared->errors[i] = error;
      shared->done[i] = true;
      shared->cv.notify_all();
    }).detach();
  }
  std::unique_lock<std::mutex> lock(shared->mu);
  shared->cv.wait_for(lock, timeout, [&] {
    return std::all_of(shared->done.begin(), shared->done.end(), [](bool d) { return d; });
  });
  for (size_t i = 0; i < n; ++i) {
    if (!shared->done[i]) {
      hosts[i].resolve_error = "the resolver did not answer within " + std::to_string(timeout.count()) + " ms";
    } else {
      hosts[i].head_addrs = shared->addrs[i];
      hosts[i].resolve_error = shared->errors[i];
    }
  }
}

bool is_local(const HostOutcome& h, const launch::LocalIdentity& self) {
  if (h.name == "localhost") return true;
  if (std::find(self.names.begin(), self.names.end(), h.name) != self.names.end()) return true;
  for (const auto& a : h.head_addrs) {
    if (is_loopback_address(a)) return true;
    if (std::find(self.addresses.begin(), self.addresses.end(), a) != self.addresses.end()) return true;
  }
  return false;
}

std::vector<std::string> probe_argv(const DoctorOptions& o, const std::string& self, const HostOutcome& h,
                                    int index, const std::string& run_id) {
  std::vector<std::string> argv = {self, "doctor", "--probe", "--probe-name", h.name, "--probe-index",
                                   std::to_string(index), "--probe-run", run_id, "--ports", o.ports.text()};
  if (!o.shared_dir.empty()) {
    argv.push_back("--shared-dir");
    argv.push_back(o.shared_dir);
  }
  return argv;
}

// Parses a probe's line; null json when it is not JSON (a login banner).
nlohmann::json parse_line(const std::string& line) {
  if (line.empty() || line[0] != '{') return nullptr;
  try {
    return nlohmann::json::parse(line);
  } catch (const nlohmann::json::exception&) {
    return nullptr;
  }
}

// Takes the JSON lines of a phase; true once every live session answered.
std::function<bool()> collect(std::vector<ProbeSession*>& sessions, const char* phase, std::vector<bool>& answered_ref,
                              const std::function<void(size_t, const nlohmann::json&)>& take) {
  const size_t n = sessions.size();
  std::vector<bool>* answered_ptr = &answered_ref;
  return [&sessions, n, phase, take, answered_ptr] {
    std::vector<bool>& answered = *answered_ptr;
    bool all = true;
    for (size_t i = 0; i < n; ++i) {
      while (auto line = sessions[i]->next_line()) {
        nlohmann::json j = parse_line(*line);
        if (j.is_object() && j.value("phase", "") == phase && !answered[i]) {
          answered[i] = true;
          take(i, j);
        }
      }
      if (!answered[i] && !sessions[i]->ended()) all = false;
    }
    return all;
  };
}

// Phase 1: every probe at once, each to answer with its facts; while they
// start, how ssh here checks each host's key.
void start_probes(const DoctorOptions& o, DoctorInput& in, const launch::LocalIdentity& self_id,
                  std::vector<std::unique_ptr<ProbeSession>>& owned, std::vector<ProbeSession*>& sessions) {
  const size_t n = in.hosts.size();
  const std::string self = self_executable();
  const std::string run_id = random_run_id();
  launch::SshSpawner spawner(o.ssh);
  for (size_t i = 0; i < n; ++i) {
    HostOutcome& h = in.hosts[i];
    h.local = is_local(h, self_id);
    auto argv = probe_argv(o, self, h, static_cast<int>(i), run_id);
    if (!h.local) {
      std::string remote = "exec";
      for (const auto& w : argv) remote += " " + launch::shell_quote(w);
      std::vector<std::string> ssh = {o.ssh.ssh};
      for (const auto& opt : spawner.ssh_options()) ssh.push_back(opt);
      ssh.push_back(h.name);
      ssh.push_back(remote);
      argv = ssh;
    }
    owned.push_back(std::make_unique<ProbeSession>(argv));
    sessions.push_back(owned.back().get());
  }
  for (auto& h : in.hosts) {
    if (h.local) continue;
    std::vector<std::string> prefix = {o.ssh.ssh};
    for (const auto& opt : spawner.ssh_options()) prefix.push_back(opt);
    h.known = look_up_known_host(prefix, h.name);
  }
}

// Phase 1's answers: the hosts whose probes gave their facts; for the
// others, why not.
std::vector<size_t> gather_facts(const DoctorOptions& o, DoctorInput& in, std::vector<ProbeSession*>& sessions) {
  const size_t n = in.hosts.size();
  std::vector<bool> has_facts(n, false);
  pump_until(sessions, Deadline(seconds_to_millis(o.probe_timeout_s)),
             collect(sessions, "facts", has_facts, [&](size_t i, const nlohmann::json& j) {
               try {
                 in.hosts[i].facts = host_facts_from_json(j.at("facts"));
                 in.hosts[i].session_ok = true;
               } catch (const std::exception& e) {
                 in.hosts[i].stderr_text = std::string("unreadable facts: ") + e.what();
               }
               in.hosts[i].connect_s = sessions[i]->age_s();
             }));
  std::vector<size_t> live;
  for (size_t i = 0; i < n; ++i) {
    HostOutcome& h = in.hosts[i];
    if (h.facts) {
      live.push_back(i);
      continue;
    }
    // Either it ended (ssh's or the probe's exit code says why) or it ran out of time.
    if (!sessions[i]->ended()) {
      h.timed_out = true;
      h.connect_s = sessions[i]->age_s();
      sessions[i]->kill();
    }
    h.exit_code = h.timed_out ? -1 : sessions[i]->exit_code();
    std::string err = sessions[i]->stderr_text();
    if (!h.stderr_text.empty()) err += (err.empty() ? "" : "\n") + h.stderr_text;
    h.stderr_text = err;
  }
  return live;
}

// Phase 2: clocks. Each reply is bracketed by our own clock.
void measure_clocks(DoctorInput& in, std::vector<ProbeSession*>& sessions, const std::vector<size_t>& live) {
  const size_t n = in.hosts.size();
  std::vector<std::int64_t> sent(n, 0);
  std::vector<bool> timed(n, true);
  for (size_t i : live) {
    timed[i] = false;
    sent[i] = unix_ns();
    if (!sessions[i]->send("time")) timed[i] = true;
  }
  pump_until(sessions, Deadline(Millis(3000)), collect(sessions, "time", timed, [&](size_t i, const nlohmann::json& j) {
               std::int64_t back = unix_ns();
               std::int64_t theirs = j.value("time_ns", std::int64_t{0});
               in.hosts[i].clock_skew_s = (theirs - (sent[i] + back) / 2) / 1e9;
               in.hosts[i].clock_error_s = (back - sent[i]) / 2e9;
             }));
}

// Phase 3: tokens and pairwise connects, all hosts at once.
void check_pairs(const DoctorOptions& o, DoctorInput& in, std::vector<ProbeSession*>& sessions,
                 const std::vector<size_t>& live) {
  const size_t n = in.hosts.size();
  nlohmann::json peers = nlohmann::json::array();
  for (size_t i : live) {
    peers.push_back({{"index", i}, {"name", in.hosts[i].name}, {"ports", in.hosts[i].facts->ports}});
  }
  nlohmann::json go = {{"peers", peers}, {"connect_timeout_s", o.connect_timeout_s}};
  std::vector<bool> paired(n, true);
  for (size_t i : live) {
    paired[i] = false;
    if (!sessions[i]->send("go " + go.dump())) paired[i] = true;
  }
  pump_until(sessions, Deadline(seconds_to_millis(o.connect_timeout_s + 5)),
             collect(sessions, "pairs", paired, [&](size_t i, const nlohmann::json& j) {
               HostOutcome& h = in.hosts[i];
               h.pairs_reported = true;
               h.tokens_seen = j.value("tokens_seen", std::vector<int>{});
               h.tokens_missing = j.value("tokens_missing", std::vector<int>{});
               for (const auto& c : j.value("connects", nlohmann::json::array())) {
                 in.connects.push_back({static_cast<int>(i), c.value("to", 0), c.value("port", 0),
                                        c.value("ok", false), c.value("error", "")});
               }
             }));
}

// Phase 4 (full mode): one pair at a time, so measurements do not share links.
void measure_pairs(DoctorInput& in, std::vector<ProbeSession*>& sessions, const std::vector<size_t>& live) {
  const size_t n = in.hosts.size();
  for (size_t a : live) {
    for (size_t b : live) {
      if (a == b || in.hosts[b].facts->ports.empty() || !in.hosts[a].pairs_reported) continue;
      PairPerf p;
      p.from = static_cast<int>(a);
      p.to = static_cast<int>(b);
      nlohmann::json m = {{"to", b}, {"name", in.hosts[b].name}, {"port", in.hosts[b].facts->ports[0]}};
      std::vector<bool> got(n, true);
      got[a] = !sessions[a]->send("measure " + m.dump());
      bool ok = pump_until(sessions, Deadline(Millis(8000)),
                           collect(sessions, "measure", got, [&](size_t, const nlohmann::json& j) {
                             p.rtt_us = j.value("rtt_us", -1.0);
                             p.gbps = j.value("gbps", -1.0);
                             p.error = j.value("error", "");
                           }));
      if (!ok || !got[a]) p.error = p.error.empty() ? "no answer within 8 s" : p.error;
      in.perf.push_back(p);
    }
  }
}

}  // namespace

Report run_doctor(const DoctorOptions& o) {
  if (o.hosts.empty()) throw_invalid_argument("doctor: no hosts to check");
  if (!o.shared_dir.empty() && o.shared_dir[0] != '/') {
    throw_invalid_argument("--shared-dir " + o.shared_dir +
                           ": give an absolute path (ssh sessions start in the home directory)");
  }
  auto t0 = SteadyClock::now();
  DoctorInput in;
  in.head = local_head_facts(o.version, o.git);
  in.shared_dir = o.shared_dir;
  in.ports_text = o.ports.text();
  in.quick = o.quick;
  in.ssh_identity = o.ssh.identity;
  size_t n = o.hosts.size();
  in.hosts.resize(n);
  for (size_t i = 0; i < n; ++i) {
    in.hosts[i].name = o.hosts[i].name;
    in.hosts[i].slots = o.hosts[i].slots;
  }
  resolve_all(in.hosts, seconds_to_millis(o.resolve_timeout_s));
  auto self_id = launch::LocalIdentity::current();

  // Phase 1: every probe at once, each answering with its facts.
  std::vector<std::unique_ptr<ProbeSession>> owned;
  std::vector<ProbeSession*> sessions;
  start_probes(o, in, self_id, owned, sessions);

  const std::vector<size_t> live = gather_facts(o, in, sessions);

  measure_clocks(in, sessions, live);

  check_pairs(o, in, sessions, live);

  if (!o.quick) measure_pairs(in, sessions, live);

  // Done: end of stdin tells every probe to clean up and exit.
  for (auto* s : sessions) s->close_input();
  pump_until(sessions, Deadline(Millis(2000)), [&] {
    for (auto* s : sessions) {
      while (s->next_line()) {
      }
      if (!s->ended()) return false;
    }
    return true;
  });
  for (auto* s : sessions) s->kill();

  Report rep = build_report(in);
  rep.elapsed_s = std::chrono::duration<double>(SteadyClock::now() - t0).count();
  return rep;
}

}  // namespace hpct::doctor
