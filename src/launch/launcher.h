// `hpctrain launch`: from a command line to a supervised job.
//
// run_launch() places the ranks on the hosts, picks the spawner, serves the
// job's store, builds each rank's spec (environment, secret, store address)
// and runs the job under a Supervisor, restarting the whole group up to
// max_restarts times after a failure. See supervisor.h for how a job is
// watched and stopped, rank_protocol.h for what reaches each rank.
#pragma once

#include <string>
#include <vector>

#include "core/config.h"
#include "core/env.h"
#include "core/log.h"
#include "launch/hostfile.h"
#include "launch/placement.h"
#include "launch/ssh_spawner.h"

namespace hpct::launch {

struct LaunchOptions {
  int np = 0;                          // 0: every slot of the hosts
  std::vector<HostEntry> hosts;        // empty: this machine with np slots
  std::string spawner = "auto";        // auto (local, or ssh when a host is remote) | local | ssh | mpirun | srun
  std::string backend = "auto";        // passed to ranks as HPCT_BACKEND
  std::string network_interface;       // store binds to it; ranks get HPCT_NETWORK_INTERFACE
  std::string output_dir;
  std::string prefix = "rank";         // none | rank | host
  int max_restarts = 0;
  double start_timeout_s = 30;
  double grace_s = 3;
  std::vector<std::string> env;        // NAME (this environment's value) or NAME=VALUE
  std::vector<std::string> argv;       // the program and its arguments
  SshOptions ssh;
  bool ssh_options_given = false;      // -p/-i/--ssh-option were set (passed on to mpirun)
  std::vector<std::string> spawner_args;  // appended to mpirun's or srun's command line
  // Each rank runs in a memory cgroup of its own with this limit ("2G",
  // "1500M"; memory_cgroup.h), on every host; empty: none.
  std::string memory_per_rank;
  std::string mpirun = "mpirun";
  std::string srun = "srun";
  // Parameter servers (docs/ps.md): K processes of `hpctrain ps-server`
  // beside the workers, on server_hosts (in turn) or spread over the
  // workers' hosts. Local and ssh spawners only.
  int servers = 0;
  std::vector<std::string> server_hosts;
  // Prometheus endpoints (docs/metrics.md): rank r serves /metrics on
  // metrics_port + its local rank (0: off); metrics_sd names a file the
  // launcher writes for Prometheus's file-based discovery, one target per rank.
  int metrics_port = 0;
  std::string metrics_sd;
  // Elastic jobs (docs/elastic.md, elastic_supervisor.h): any of these set.
  // Workers come from the discovery script (or the hosts), between min_np
  // and max_np of them; a lost host does not end the job.
  int min_np = 0;
  int max_np = 0;
  std::string host_discovery_script;
  double discovery_interval_s = 1;
  double blacklist_cooldown_s = 60;
  double elastic_timeout_s = 60;       // HPCT_ELASTIC_TIMEOUT_S
  bool elastic() const { return min_np > 0 || max_np > 0 || !host_discovery_script.empty(); }
};

// The file_sd_configs document for the ranks placed as `ranks`: one group
// with every rank's host:port and the label launch_id (the job's id; not
// `job`, which stays the scrape configuration's). all_local: every rank
// listens on loopback.
std::string prometheus_targets(const std::vector<RankPlacement>& ranks, int base_port, bool all_local,
                               const std::string& job_id);

// Runs the job to its end and returns the launcher's exit code: 0, the
// failed rank's exit code (128+n for a signal), 124 when a rank did not
// start in time, 3 when a host or spawner was lost, 128+n when the launcher
// itself got signal n. Bad options raise InvalidArgument before anything
// starts. Blocks; call from the main thread.
int run_launch(const LaunchOptions& options, const Config& config, const Env& env,
               const Logger& logger);

}  // namespace hpct::launch
