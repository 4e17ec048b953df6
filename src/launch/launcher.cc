#include "launch/launcher.h"
#include "launch/torchrun_env.h"

#include <signal.h>
#include <cstdlib>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <memory>
#include <thread>

#include <nlohmann/json.hpp>

#include "comm/connect.h"
#include "core/error.h"
#include "core/fd.h"
#include "core/subprocess.h"
#include "launch/elastic_supervisor.h"
#include "launch/job_store.h"
#include "launch/local_spawner.h"
#include "launch/memory_cgroup.h"
#include "launch/mpirun_spawner.h"
#include "launch/output.h"
#include "launch/placement.h"
#include "launch/rank_protocol.h"
#include "launch/srun_spawner.h"
#include "launch/supervisor.h"
#include "store/tcp_store.h"
#include "why/flight_merge.h"

namespace hpct::launch {
namespace {

// Variables a rank needs from the launcher's side on every host: the
// user's HPCT_* settings (env or --set), PATH and the library paths, and
// --env. Job variables and the store's own come from the wrapper.
std::map<std::string, std::string> carried_env(const LaunchOptions& o, const Config& config,
                                               const Env& env) {
  std::map<std::string, std::string> out;
  for (const char* name : {"PATH", "LD_LIBRARY_PATH", "PYTHONPATH", "OMP_NUM_THREADS"}) {
    if (auto v = env.get(name)) out[name] = *v;
  }
  for (const auto& e : config.describe()) {
    if (e.source == ConfigSource::kDefault) continue;
    if (e.env_name == "HPCT_STORE_ADDR" || e.env_name == "HPCT_SECRET_FD" ||
        e.env_name == "HPCT_STORE_DIR") {
      continue;
    }
    out[e.env_name] = e.value;
  }
  out["HPCT_BACKEND"] = o.backend;
  if (!o.network_interface.empty()) out["HPCT_NETWORK_INTERFACE"] = o.network_interface;
  for (const auto& item : o.env) {
    auto eq = item.find('=');
    std::string name = item.substr(0, eq);
    if (name.empty()) throw_invalid_argument("--env " + item + ": expected NAME or NAME=VALUE");
    if (eq != std::string::npos) {
      out[name] = item.substr(eq + 1);
    } else if (auto v = env.get(name)) {
      out[name] = *v;
    } else {
      throw_invalid_argument("--env " + name + ": " + name +
                             " is not set here; give a value with --env " + name + "=VALUE");
    }
  }
  return out;
}

std::string own_hostname() {
  char buf[256] = {};
  if (::gethostname(buf, sizeof buf - 1) != 0) return "localhost";
  return buf;
}

std::string make_job_id() {
  auto now = std::chrono::system_clock::now().time_since_epoch();
  return "launch-" + std::to_string(::getpid()) + "-" +
         std::to_string(std::chrono::duration_cast<std::chrono::milliseconds>(now).count() % 100000000);
}

// Blocks the launcher's stop signals and returns a signalfd for them, so the
// supervisor's loop sees them instead of the process dying with ranks left.
UniqueFd stop_signal_fd() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGHUP);
  ::sigprocmask(SIG_BLOCK, &set, nullptr);
  ::signal(SIGPIPE, SIG_IGN);
  UniqueFd fd(::signalfd(-1, &set, SFD_CLOEXEC | SFD_NONBLOCK));
  if (!fd.valid()) throw_io("signalfd", errno);
  return fd;
}

// A 0700 directory for the rank spec under $HOME/.hpctrain/jobs: the home
// directory is the one place a cluster's hosts most often share.
std::string make_private_dir(const Env& env) {
  std::string base = env.get("HOME").value_or("/tmp");
  for (const char* sub : {"/.hpctrain", "/jobs"}) {
    base += sub;
    if (::mkdir(base.c_str(), 0700) != 0 && errno != EEXIST) throw_io("cannot create " + base, errno);
  }
  // Directories of launchers that were killed outright (the SIGKILL case
  // cannot clean up) go now: the name carries the owner's pid.
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(base, ec)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind("job-", 0) != 0) continue;
    long pid = std::strtol(name.c_str() + 4, nullptr, 10);
    if (pid > 0 && ::kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH) {
      std::filesystem::remove_all(entry.path(), ec);
    }
  }
  std::string tmpl = base + "/job-" + std::to_string(::getpid()) + "-XXXXXX";
  if (::mkdtemp(tmpl.data()) == nullptr) throw_io("mkdtemp " + tmpl, errno);
  return tmpl;
}

// --memory-per-rank: the limit into the spec, and the job's cgroup folder
// on this host when ranks run here (nullptr otherwise). Refuses, before any
// rank starts, when this host cannot limit them.
std::unique_ptr<JobMemoryCgroups> memory_cgroups(const LaunchOptions& o, const std::string& job_id,
                                                 const std::vector<bool>& rank_is_local, RankSpec* spec) {
  if (o.memory_per_rank.empty()) return nullptr;
  spec->memory_per_rank = parse_memory_per_rank(o.memory_per_rank);
  if (std::find(rank_is_local.begin(), rank_is_local.end(), true) == rank_is_local.end()) return nullptr;
  return std::make_unique<JobMemoryCgroups>(job_id);
}

// `launch --min-np/--max-np/--host-discovery-script`: workers come and go.
namespace {

// After a failed attempt: the restart that follows, or the job's end.
void say_restart_or_end(OutputMux& output, int attempt, int max_restarts, int exit_code) {
  if (attempt < max_restarts) {
    output.launcher_line("restarting the job (restart " + std::to_string(attempt + 1) + " of " +
                         std::to_string(max_restarts) + "); ranks see HPCT_RESTART=" +
                         std::to_string(attempt + 1));
  } else {
    output.launcher_line("job failed" +
                         (max_restarts > 0 ? " after " + std::to_string(max_restarts) + " restarts" : std::string()) +
                         "; exit code " + std::to_string(exit_code));
  }
}

}  // namespace

// The elastic supervisor's options from the launch options (refusing what
// an elastic job cannot do); the signal descriptor is set later.
ElasticOptions elastic_options(const LaunchOptions& o) {
  if (o.servers > 0) throw_invalid_argument("--servers does not run in an elastic job; drop --min-np/--max-np");
  if (o.spawner != "auto" && o.spawner != "local" && o.spawner != "ssh") {
    throw_invalid_argument("an elastic job starts its workers with the local or ssh spawner; drop --spawner " +
                           o.spawner);
  }
  if (o.backend == "mpi") throw_invalid_argument("an elastic job needs --backend gloo (MPI worlds cannot change size)");
  if (o.discovery_interval_s <= 0 || o.elastic_timeout_s <= 0 || o.blacklist_cooldown_s < 0) {
    throw_invalid_argument("--discovery-interval and HPCT_ELASTIC_TIMEOUT_S must be positive, "
                           "--blacklist-cooldown 0 or more");
  }
  ElasticOptions eo;
  eo.discovery_script = o.host_discovery_script;
  eo.hosts = o.hosts;
  if (eo.discovery_script.empty() && eo.hosts.empty()) {
    if (o.np < 1 && o.max_np < 1) {
      throw_invalid_argument("an elastic job needs --host-discovery-script S, hosts (-H/--hostfile) or -np");
    }
    eo.hosts.push_back(HostEntry{own_hostname(), std::max(o.np, o.max_np), "this machine"});
  }
  int total_slots = 0;
  for (const auto& h : eo.hosts) total_slots += h.slots;
  eo.max_np = o.max_np > 0 ? o.max_np : (o.np > 0 ? o.np : std::max(1, total_slots));
  eo.min_np = o.min_np > 0 ? o.min_np : 1;
  if (eo.min_np > eo.max_np) {
    throw_invalid_argument("--min-np " + std::to_string(eo.min_np) + " is above --max-np " +
                           std::to_string(eo.max_np));
  }
  eo.discovery_interval = seconds_to_millis(o.discovery_interval_s);
  eo.blacklist_cooldown = seconds_to_millis(o.blacklist_cooldown_s);
  eo.elastic_timeout = seconds_to_millis(o.elastic_timeout_s);
  eo.start_timeout = seconds_to_millis(o.start_timeout_s);
  eo.grace = seconds_to_millis(o.grace_s);
  return eo;
}

int run_elastic_launch(const LaunchOptions& o, const Config& config, const Env& env, const Logger& logger) {
  ElasticOptions eo = elastic_options(o);
  // The first host list: where the store must be reachable from.
  const std::vector<HostEntry> first = eo.hosts;
  const OutputPrefix prefix = parse_output_prefix(o.prefix);

  const LocalIdentity self = LocalIdentity::current();
  std::vector<std::string> remote_hosts;
  for (const auto& h : first) {
    if (!is_local_host(h.name, self)) remote_hosts.push_back(h.name);
  }
  if (!eo.discovery_script.empty() && o.network_interface.empty()) {
    // Hosts come later: the store must listen where they can reach it.
    for (const auto& h : discover_hosts(eo.discovery_script, Millis(10000))) {
      if (!is_local_host(h.name, self)) remote_hosts.push_back(h.name);
    }
  }
  const std::string bind = choose_store_address(o.network_interface, remote_hosts);
  UniqueFd signals = stop_signal_fd();
  JobStore job_store(bind, static_cast<size_t>(config.max_frame_bytes), logger);
  store::TcpStoreOptions so;
  {
    const std::string addr = job_store.address();
    so.host = addr.substr(0, addr.rfind(':'));
    so.port = std::stoi(addr.substr(addr.rfind(':') + 1));
  }
  so.secret = job_store.secret();
  so.max_frame_bytes = static_cast<size_t>(config.max_frame_bytes);
  auto store_client = std::make_shared<store::TcpStore>(so);

  RankSpec spec;
  spec.argv = o.argv;
  spec.cwd = std::filesystem::current_path().string();
  spec.env = carried_env(o, config, env);
  spec.env["HPCT_ELASTIC_TIMEOUT_S"] = std::to_string(o.elastic_timeout_s);
  if (!o.metrics_sd.empty()) {
    throw_invalid_argument("--metrics-sd lists a fixed set of ranks, and an elastic job's workers come and go; "
                           "drop --metrics-sd (each worker still serves --metrics-port: point Prometheus at "
                           "HOST:PORT of every host the discovery script may list)");
  }
  if (o.metrics_port != 0) {
    if (o.metrics_port < 0 || o.metrics_port > 65535) {
      throw_invalid_argument("--metrics-port " + std::to_string(o.metrics_port) + ": a port in 1..65535");
    }
    // Every elastic worker is local rank 0 on its host: one worker per host serves this port.
    spec.env["HPCT_METRICS_PORT"] = std::to_string(o.metrics_port);
  }
  spec.secret = job_store.secret();
  spec.store_addr = job_store.address();
  spec.job_id = make_job_id();
  spec.grace_s = o.grace_s;
  std::vector<bool> local_hosts;
  for (const auto& h : first) local_hosts.push_back(o.spawner == "local" || is_local_host(h.name, self));
  std::unique_ptr<JobMemoryCgroups> cgroups = memory_cgroups(o, spec.job_id, local_hosts, &spec);
  eo.signal_fd = signals.get();

  SshSpawner ssh(o.ssh);
  const std::string wrapper = self_executable();
  auto plan_worker = [&](int id, const std::string& host) {
    JobLayout layout;
    RankPlacement p;
    p.rank = id;
    p.host = host;
    layout.ranks = {p};
    layout.rank_is_local.assign(static_cast<size_t>(id) + 1, false);
    layout.rank_is_local[static_cast<size_t>(id)] = o.spawner == "local" || is_local_host(host, self);
    if (o.spawner == "local" && !is_local_host(host, self)) {
      throw_invalid_argument("--spawner local runs workers on this machine only, but discovery lists " + host);
    }
    layout.wrapper = wrapper;
    return ssh.plan(layout).at(0);
  };
  OutputMux output(prefix, {}, o.output_dir);
  output.launcher_line("elastic job " + spec.job_id + ": " + std::to_string(eo.min_np) + " to " +
                       std::to_string(eo.max_np) + " workers" +
                       (eo.discovery_script.empty() ? "" : ", hosts from " + eo.discovery_script));
  ElasticSupervisor supervisor(eo, spec, plan_worker, output, logger, store_client);
  int exit_code = 0;
  for (int attempt = 0; attempt <= o.max_restarts; ++attempt) {
    AttemptResult r = supervisor.run(attempt);
    if (r.ok) return 0;
    exit_code = r.exit_code == 0 ? 1 : r.exit_code;
    output.launcher_line(r.summary);
    if (r.interrupted_by != 0) break;
    say_restart_or_end(output, attempt, o.max_restarts, exit_code);
  }
  return exit_code;
}

// Placement: the ranks (and parameter servers) on the hosts, which of
// them are this machine, and the hosts that are not. Without hosts, this
// machine takes every rank. *np_out: -np, or every slot of the hosts.
JobLayout place_job(const LaunchOptions& o, const std::string& spawner, int* np_out,
                    std::vector<std::string>* remote_out) {
  JobLayout layout;
  *np_out = o.np;
  std::vector<HostEntry> hosts = o.hosts;
  int& np = *np_out;
  if (hosts.empty()) {
    if (np < 1) throw_invalid_argument("-np is required when no hosts are given");
    hosts.push_back(HostEntry{own_hostname(), np, "this machine"});
  }
  if (np == 0) {
    for (const auto& h : hosts) np += h.slots;
  }
  layout.ranks = place_ranks(hosts, np);
  if (o.servers < 0) throw_invalid_argument("--servers must be 0 or more");
  if (o.servers == 0 && !o.server_hosts.empty()) {
    throw_invalid_argument("--server-hosts needs --servers K");
  }
  if (o.servers > 0) {
    if (spawner == "mpirun" || spawner == "srun") {
      throw_invalid_argument("--servers runs with the local and ssh spawners only (mpirun and srun "
                             "start one program for every rank); drop --spawner " + spawner);
    }
    auto servers = place_servers(layout.ranks, o.server_hosts, o.servers);
    layout.ranks.insert(layout.ranks.end(), servers.begin(), servers.end());
  }
  const LocalIdentity self = LocalIdentity::current();
  std::vector<std::string>& remote_hosts = *remote_out;
  {
    std::map<std::string, bool> local_by_host;
    for (const auto& r : layout.ranks) {
      auto it = local_by_host.find(r.host);
      if (it == local_by_host.end()) {
        it = local_by_host.emplace(r.host, is_local_host(r.host, self)).first;
        if (!it->second) remote_hosts.push_back(r.host);
      }
      layout.rank_is_local.push_back(it->second);
    }
  }
  return layout;
}

// The spawner by name; mpirun's gets a private directory for the ranks'
// spec files (removed by the caller however the launch ends).
std::unique_ptr<Spawner> make_spawner(const LaunchOptions& o, const std::string& spawner, const Env& env,
                                      JobLayout* layout, std::string* private_dir) {
  if (spawner == "local") {
    return std::make_unique<LocalSpawner>();
  } else if (spawner == "ssh") {
    return std::make_unique<SshSpawner>(o.ssh);
  } else if (spawner == "mpirun") {
    MpirunOptions m;
    m.mpirun = o.mpirun;
    m.flavor = detect_mpi_flavor(o.mpirun);
    m.is_root = ::geteuid() == 0;
    m.ssh = o.ssh;
    m.ssh_options_given = o.ssh_options_given;
    m.network_interface = o.network_interface;
    m.extra_args = o.spawner_args;
    *private_dir = make_private_dir(env);
    layout->private_dir = *private_dir;
    return std::make_unique<MpirunSpawner>(m);
  } else {
    SrunOptions s;
    s.srun = o.srun;
    s.extra_args = o.spawner_args;
    return std::make_unique<SrunSpawner>(s);
  }
}

// --metrics-port for every rank, and --metrics-sd: Prometheus's file of
// the ranks' endpoints.
void add_metrics(const LaunchOptions& o, const std::string& spawner, const JobLayout& layout,
                 const std::vector<std::string>& remote_hosts, const Logger& logger, RankSpec* spec) {
  if (o.metrics_port != 0) {
    if (o.metrics_port < 0 || o.metrics_port > 65535) {
      throw_invalid_argument("--metrics-port " + std::to_string(o.metrics_port) +
                             ": a base port in 1..65535 (rank r listens on base + its local rank)");
    }
    spec->env["HPCT_METRICS_PORT"] = std::to_string(o.metrics_port);
  }
  if (!o.metrics_sd.empty()) {
    if (o.metrics_port == 0 || spawner == "srun") {
      throw_invalid_argument("--metrics-sd needs --metrics-port, and ranks placed by hpctrain launch "
                             "(not --spawner srun: Slurm places them)");
    }
    // Written whole under another name and renamed, so Prometheus never reads half a file.
    const std::string tmp = o.metrics_sd + ".tmp";
    {
      std::ofstream f(tmp);
      f << prometheus_targets(layout.ranks, o.metrics_port, remote_hosts.empty(), spec->job_id);
      if (!f) throw_io("write " + tmp, errno ? errno : EIO);
    }
    std::filesystem::rename(tmp, o.metrics_sd);
    logger.info("launch", "Prometheus targets of job " + spec->job_id + " in " + o.metrics_sd);
  }
}

// The job's directory (HPCT_JOB_DIR, else $HOME/.hpctrain/runs/JOB_ID: the
// home directory is what a cluster's hosts most often share), with
// job.json: the job id, its size and each rank's host, for `hpctrain why`.
std::string prepare_job_dir(const Config& config, const Env& env, const std::string& job_id,
                            const std::vector<std::string>& host_by_rank, int np,
                            const std::vector<std::string>& argv) {
  std::string dir = config.job_dir;
  if (dir.empty()) dir = env.get("HOME").value_or("/tmp") + "/.hpctrain/runs/" + job_id;
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) throw_io("cannot create the job directory " + dir + " (set HPCT_JOB_DIR to a writable one)", ec.value());
  nlohmann::json j;
  j["job_id"] = job_id;
  j["size"] = np;
  j["hosts"] = std::vector<std::string>(host_by_rank.begin(), host_by_rank.begin() + std::min<size_t>(np, host_by_rank.size()));
  j["argv"] = argv;
  std::ofstream f(dir + "/job.json");
  f << j.dump(1) << "\n";
  if (!f) throw_io("cannot write " + dir + "/job.json", errno ? errno : EIO);
  return dir;
}

// After a failed attempt: waits (at most 2 s) until every rank's record or
// its wrapper's note is there (a rank cut off from the others writes its
// own on its timeout), then prints what `hpctrain why` says.
void print_why(OutputMux& output, const std::string& job_dir, int np) {
  if (job_dir.empty()) return;
  const Deadline deadline(Millis(2000));
  auto all_there = [&] {
    for (int r = 0; r < np; ++r) {
      const std::string base = job_dir + "/flight/rank-" + std::to_string(r);
      if (::access((base + ".json").c_str(), F_OK) != 0 && ::access((base + ".wrapper.json").c_str(), F_OK) != 0) {
        return false;
      }
    }
    return true;
  };
  while (!all_there() && !deadline.expired()) std::this_thread::sleep_for(Millis(100));
  try {
    why::JobRecords records = why::read_job_records(job_dir);
    if (records.ranks.empty()) {
      // Not an engine program, or every rank died before it could answer
      // (all killed by the OOM killer): only the wrappers' word on how.
      for (const auto& [rank, note] : records.notes) {
        if (note.ended.empty()) continue;
        const size_t r = static_cast<size_t>(rank);
        output.launcher_line("why: rank " + std::to_string(rank) +
                             (r < records.hosts.size() ? " (host " + records.hosts[r] + ") " : " ") + note.ended);
      }
      return;
    }
    for (const auto& line : why::explain(records).lines) output.launcher_line("why: " + line);
    output.launcher_line("why: the records: hpctrain why " + job_dir);
  } catch (const Error&) {
    // No flight directory: no rank wrote a record.
  }
}

// The default job directory goes when there is nothing to explain: the job
// succeeded, or no rank wrote a record of its own (only wrappers' notes).
void remove_unexplained_job_dir(const std::string& job_dir, int exit_code) {
  bool records = false;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(job_dir + "/flight", ec)) {
    const std::string f = e.path().filename().string();
    records = records || (f.rfind("rank-", 0) == 0 && f.find(".wrapper.") == std::string::npos);
  }
  if (exit_code == 0 || !records) std::filesystem::remove_all(job_dir, ec);
}

// The job's attempts: the first, then a restart after each failure (up to
// --max-restarts) unless a signal stopped it. Returns the exit code.
int run_attempts(Supervisor& supervisor, OutputMux& output, const LaunchOptions& o, int np,
                 const std::string& job_dir) {
  int exit_code = 0;
  for (int attempt = 0; attempt <= o.max_restarts; ++attempt) {
    std::error_code ec;
    std::filesystem::remove_all(job_dir + "/flight", ec);  // an earlier attempt's records
    AttemptResult r = supervisor.run(attempt);
    if (r.ok) {
      std::filesystem::remove_all(job_dir + "/flight", ec);  // written at every rank's end
      exit_code = 0;
      break;
    }
    exit_code = r.exit_code == 0 ? 1 : r.exit_code;
    std::string stopped = np > 1 ? "; stopped the other ranks in " +
                                       std::to_string(r.stop_time.count()) + " ms"
                                 : "";
    output.launcher_line(r.summary + stopped);
    if (!r.tail.empty()) {
      output.launcher_line("last lines of " + r.tail_from + ":");
      for (const auto& l : r.tail) output.launcher_line("  | " + l);
    }
    print_why(output, job_dir, np);
    if (r.interrupted_by != 0) break;
    say_restart_or_end(output, attempt, o.max_restarts, exit_code);
  }
  return exit_code;
}

}  // namespace

int run_launch(const LaunchOptions& o, const Config& config, const Env& env, const Logger& logger) {
  if (o.argv.empty() && o.elastic()) throw_invalid_argument("launch: no program given; usage: hpctrain launch --min-np A --max-np B -- PROGRAM ARGS...");
  if (o.elastic()) {
    if (o.max_restarts < 0) throw_invalid_argument("--max-restarts must be 0 or more");
    return run_elastic_launch(o, config, env, logger);
  }
  if (o.argv.empty()) throw_invalid_argument("launch: no program given; usage: hpctrain launch -np N -- PROGRAM ARGS...");
  if (o.max_restarts < 0) throw_invalid_argument("--max-restarts must be 0 or more");
  if (o.start_timeout_s <= 0) throw_invalid_argument("--start-timeout must be positive");
  const OutputPrefix prefix = parse_output_prefix(o.prefix);
  std::string spawner = o.spawner;
  if (spawner != "auto" && spawner != "local" && spawner != "ssh" && spawner != "mpirun" && spawner != "srun") {
    throw_invalid_argument("--spawner " + spawner + ": choose local, ssh, mpirun or srun");
  }
  if (o.backend != "auto" && o.backend != "mpi" && o.backend != "gloo") {
    throw_invalid_argument("--backend " + o.backend + ": choose auto, mpi or gloo");
  }
  if (spawner == "srun" && !o.hosts.empty()) {
    throw_invalid_argument("--spawner srun takes its hosts from the Slurm allocation; drop -H/--hostfile");
  }

  // Placement. Without hosts, this machine takes every rank.
  int np = 0;
  std::vector<std::string> remote_hosts;
  JobLayout layout = place_job(o, spawner, &np, &remote_hosts);
  if (spawner == "auto") spawner = remote_hosts.empty() ? "local" : "ssh";
  if (o.backend == "mpi" && (spawner == "local" || spawner == "ssh")) {
    throw_invalid_argument("--backend mpi needs an MPI runtime: use --spawner mpirun (or srun with MPI)");
  }
  layout.wrapper = self_executable();  // hpctrain, which starts in milliseconds (no libtorch)

  // The store binds where the ranks can reach it.
  std::string bind = choose_store_address(o.network_interface, remote_hosts);
  if (spawner == "srun") {
    auto nodes = env.get("SLURM_JOB_NUM_NODES").value_or(env.get("SLURM_NNODES").value_or("1"));
    if (nodes != "1" && o.network_interface.empty()) {
      bind = comm::local_address_towards(own_hostname());
      if (bind.rfind("127.", 0) == 0) {
        throw_invalid_argument("the Slurm allocation spans " + nodes + " nodes but this host's name "
                               "resolves to loopback; name the interface with --network-interface");
      }
    }
  }

  std::unique_ptr<Spawner> sp;
  std::string private_dir;
  // Removed however run_launch ends (the secret must not stay on disk).
  struct RemoveDir {
    const std::string& dir;
    ~RemoveDir() {
      std::error_code ec;
      if (!dir.empty()) std::filesystem::remove_all(dir, ec);
    }
  } remove_private_dir{private_dir};
  sp = make_spawner(o, spawner, env, &layout, &private_dir);
  std::vector<ProcessPlan> plans = sp->plan(layout);

  UniqueFd signals = stop_signal_fd();
  JobStore store(bind, static_cast<size_t>(config.max_frame_bytes), logger);

  RankSpec spec;
  spec.job_id = make_job_id();
  // Before any rank starts: refused here when this host cannot limit them.
  std::unique_ptr<JobMemoryCgroups> cgroups = memory_cgroups(o, spec.job_id, layout.rank_is_local, &spec);
  spec.size = np;
  spec.servers = o.servers;
  if (o.servers > 0) spec.server_argv = {layout.wrapper, "ps-server"};
  if (spawner != "srun") spec.placement = layout.ranks;
  spec.argv = o.argv;
  spec.cwd = std::filesystem::current_path().string();
  spec.env = carried_env(o, config, env);
  // torchrun's MASTER_ADDR and MASTER_PORT (RANK and the others: per rank, in the wrapper).
  add_torchrun_master_env(spec.env, spec.placement, remote_hosts.empty() && spawner != "srun",
                          pick_free_port());
  spec.secret = store.secret();
  spec.store_addr = store.address();
  spec.grace_s = o.grace_s;
  add_metrics(o, spawner, layout, remote_hosts, logger, &spec);

  std::vector<std::string> host_by_rank;
  for (const auto& r : layout.ranks) host_by_rank.push_back(spawner == "srun" ? "?" : r.host);
  const std::string job_dir = prepare_job_dir(config, env, spec.job_id, host_by_rank, np, o.argv);
  spec.env["HPCT_JOB_DIR"] = job_dir;
  OutputMux output(prefix, host_by_rank, o.output_dir);
  logger.debug("launch", "job " + spec.job_id + ": " + std::to_string(np) + " ranks via " + sp->name() +
                             ", store at " + spec.store_addr);

  SupervisorOptions so;
  so.start_timeout = seconds_to_millis(o.start_timeout_s);
  so.grace = seconds_to_millis(o.grace_s);
  so.signal_fd = signals.get();
  Supervisor supervisor(plans, spec, output, so, logger);

  const int exit_code = run_attempts(supervisor, output, o, np, job_dir);
  if (config.job_dir.empty()) remove_unexplained_job_dir(job_dir, exit_code);
  return exit_code;
}

std::string prometheus_targets(const std::vector<RankPlacement>& ranks, int base_port, bool all_local,
                               const std::string& job_id) {
  nlohmann::json targets = nlohmann::json::array();
  for (const auto& r : ranks) {
    targets.push_back((all_local ? std::string("127.0.0.1") : r.host) + ":" +
                      std::to_string(base_port + r.local_rank));
  }
  nlohmann::json group;
  group["targets"] = targets;
  // Not "job": Prometheus keeps a discovered job label, which would replace
  // the scrape configuration's job name that dashboards and alerts filter on.
  group["labels"] = {{"launch_id", job_id}};
  return nlohmann::json::array({group}).dump(2) + "\n";
}

}  // namespace hpct::launch
