// `hpctrain launch`: start a job's ranks on this host or many and supervise
// them (src/launch/launcher.h), and `hpctrain launch-rank`, the hidden rank
// wrapper every spawner starts on the rank's host (src/launch/rank_wrapper.h).
#include "commands.h"
#include "core/error.h"
#include "launch/launcher.h"
#include "launch/rank_wrapper.h"

namespace hpct::cli {
namespace {

struct LaunchArgs {
  launch::LaunchOptions o;
  std::string hosts;
  std::string hostfile;
  double grace_s = -1;
  double start_timeout_s = -1;
};

}  // namespace

void add_launch_command(CLI::App& app, Cli& cli) {
  auto a = std::make_shared<LaunchArgs>();
  auto* c = app.add_subcommand("launch", "Start a job's ranks on this host or many, and supervise them");
  c->add_option("-n,--np", a->o.np, "Number of ranks (-np works too); default: every slot of the hosts");
  c->add_option("-H,--hosts", a->hosts, "Hosts and slots: host1:2,host2:2");
  c->add_option("--hostfile", a->hostfile, "Hostfile: 'host slots=N' or 'host:N' per line, # comments");
  c->add_option("--spawner", a->o.spawner, "auto, local, ssh, mpirun or srun")->capture_default_str();
  c->add_option("--backend", a->o.backend, "Ranks' backend: auto, mpi or gloo")->capture_default_str();
  c->add_option("--network-interface", a->o.network_interface,
                "Interface the job store binds to and ranks use, e.g. eth0");
  c->add_option("--output-dir", a->o.output_dir, "Also write DIR/rank.N/{stdout,stderr}");
  c->add_option("--prefix", a->o.prefix, "Output line prefix: none, rank or host")->capture_default_str();
  c->add_option("--max-restarts", a->o.max_restarts, "Restart the whole job up to K times after a failure")
      ->capture_default_str();
  c->add_option("--start-timeout", a->start_timeout_s,
                "Seconds every rank has to start (default HPCT_LAUNCH_START_TIMEOUT_S)");
  c->add_option("--grace", a->grace_s, "Seconds from SIGTERM to SIGKILL when stopping ranks (default HPCT_LAUNCH_GRACE_S)");
  c->add_option("--env", a->o.env, "Pass NAME (its value here) or NAME=VALUE to every rank")
      ->type_name("NAME[=VAL]")
      ->allow_extra_args(false);  // one value per --env, so "--" still ends the options
  c->add_option("-p,--ssh-port", a->o.ssh.port, "ssh port");
  c->add_option("-i,--ssh-identity", a->o.ssh.identity, "ssh private key file");
  c->add_option("--ssh-option", a->o.ssh.options, "Extra ssh -o KEY=VALUE (repeatable)")
      ->allow_extra_args(false);
  c->add_option("--spawner-arg", a->o.spawner_args,
                "Extra argument for mpirun or srun, e.g. --spawner-arg=--overcommit (repeatable)")
      ->allow_extra_args(false);
  c->add_option("--memory-per-rank", a->o.memory_per_rank,
                "Run each rank in a memory cgroup of its own with this limit, swap excluded (e.g. 2G, 1500M; root)")
      ->type_name("SIZE");
  c->add_option("--servers", a->o.servers,
                "Also start K parameter servers (hpctrain ps-server) for --sync ps|ps-async (docs/ps.md)")
      ->capture_default_str();
  c->add_option("--server-hosts", a->o.server_hosts,
                "Hosts for the parameter servers, in turn (default: the workers' hosts)")
      ->delimiter(',')
      ->allow_extra_args(false);
  c->add_option("--metrics-port", a->o.metrics_port,
                "Every rank serves Prometheus /metrics on BASE + its local rank (docs/metrics.md)")
      ->type_name("BASE");
  c->add_option("--metrics-sd", a->o.metrics_sd,
                "Write every rank's target to FILE for Prometheus's file_sd_configs (with --metrics-port)")
      ->type_name("FILE");
  // Elastic jobs (docs/elastic.md), with Horovod's option names.
  c->add_option("--min-np", a->o.min_np,
                "Elastic: fewest workers the job trains with; below it, wait HPCT_ELASTIC_TIMEOUT_S for hosts, then fail");
  c->add_option("--max-np", a->o.max_np, "Elastic: most workers at once (default: -np, or every discovered slot)");
  c->add_option("--host-discovery-script", a->o.host_discovery_script,
                "Elastic: a command printing the usable hosts, one host:slots line each; polled while the job runs");
  c->add_option("--discovery-interval", a->o.discovery_interval_s, "Elastic: seconds between discovery runs")
      ->capture_default_str();
  c->add_option("--blacklist-cooldown", a->o.blacklist_cooldown_s,
                "Elastic: seconds a host that lost a worker gets no new workers (0: none)")
      ->capture_default_str();
  // After "--" everything is the program's, options included.
  c->add_option("command", a->o.argv, "-- PROGRAM ARGS...")->required();
  c->footer("Usage: hpctrain launch -np N [options] -- PROGRAM ARGS...");
  c->callback([&cli, a] {
    cli.run = [&cli, a] {
      launch::LaunchOptions o = a->o;
      if (!a->hosts.empty() && !a->hostfile.empty()) {
        throw_invalid_argument("give hosts with -H or --hostfile, not both");
      }
      if (!a->hosts.empty()) o.hosts = launch::parse_host_list(a->hosts);
      if (!a->hostfile.empty()) o.hosts = launch::parse_hostfile(a->hostfile);
      o.grace_s = a->grace_s >= 0 ? a->grace_s : cli.config.launch_grace_s;
      o.start_timeout_s = a->start_timeout_s >= 0 ? a->start_timeout_s : cli.config.launch_start_timeout_s;
      o.ssh.connect_timeout_s = std::min(o.start_timeout_s, 30.0);
      o.ssh_options_given = o.ssh.port > 0 || !o.ssh.identity.empty() || !o.ssh.options.empty();
      o.elastic_timeout_s = cli.config.elastic_timeout_s;
      Logger log = Logger::from_config(cli.config, -1);
      return launch::run_launch(o, cli.config, ProcessEnv(), log);
    };
  });

  auto spec_file = std::make_shared<std::string>();
  auto* w = app.add_subcommand("launch-rank", "Internal: the rank wrapper hpctrain launch starts on each host");
  w->group("");
  w->add_option("--spec-file", *spec_file, "Read the rank spec from this file instead of stdin");
  w->callback([&cli, spec_file] {
    cli.run = [spec_file] {
      launch::RankWrapperOptions o;
      o.spec_file = *spec_file;
      return launch::run_rank_wrapper(o);
    };
  });
}

}  // namespace hpct::cli
