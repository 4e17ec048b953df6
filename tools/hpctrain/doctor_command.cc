// `hpctrain doctor`: is the cluster ready? One probe per host (src/doctor/),
// a table of verdicts with a fix per failure, or --json. Exit 0 when ready,
// 1 when a check fails, 2 on bad arguments. `hpctrain doctor --probe` is the
// hidden remote side the head runs on every host.
#include <unistd.h>

#include <cstdio>
#include <iostream>

#include "commands.h"
#include "core/error.h"
#include "doctor/doctor.h"
#include "doctor/render.h"
#include "version.h"

namespace hpct::cli {
namespace {

struct DoctorArgs {
  std::string hosts;
  std::string hostfile;
  std::string shared_dir;
  std::string ports = "ephemeral";
  bool json = false;
  bool quick = false;
  launch::SshOptions ssh;
  double connect_timeout_s = 5;
  double probe_timeout_s = 15;
  // --probe: the remote side.
  bool probe = false;
  std::string probe_name;
  int probe_index = 0;
  std::string probe_run;
  double probe_lifetime_s = 120;
};

int run_probe_side(const DoctorArgs& a) {
  doctor::ProbeOptions o;
  o.listed_name = a.probe_name;
  o.index = a.probe_index;
  o.run_id = a.probe_run;
  o.shared_dir = a.shared_dir;
  o.ports = doctor::parse_port_range(a.ports);
  o.version = HPCT_VERSION;
  o.git = HPCT_GIT;
  o.lifetime_s = a.probe_lifetime_s;
  return doctor::run_probe(o, STDIN_FILENO, STDOUT_FILENO);
}

int run_doctor_command(const DoctorArgs& a) {
  if (a.probe) return run_probe_side(a);
  doctor::DoctorOptions o;
  if (!a.hosts.empty() && !a.hostfile.empty()) {
    throw_invalid_argument("give hosts with -H or --hostfile, not both");
  }
  if (!a.hosts.empty()) o.hosts = launch::parse_host_list(a.hosts);
  else if (!a.hostfile.empty()) o.hosts = launch::parse_hostfile(a.hostfile);
  else o.hosts = launch::parse_host_list("localhost");
  if (a.connect_timeout_s <= 0 || a.probe_timeout_s <= 0) {
    throw_invalid_argument("--connect-timeout and --probe-timeout must be positive");
  }
  o.shared_dir = a.shared_dir;
  o.ports = doctor::parse_port_range(a.ports);
  o.quick = a.quick;
  o.ssh = a.ssh;
  o.ssh.connect_timeout_s = a.connect_timeout_s;
  o.probe_timeout_s = std::max(a.probe_timeout_s, a.connect_timeout_s + 2);
  o.version = HPCT_VERSION;
  o.git = HPCT_GIT;
  doctor::Report r = doctor::run_doctor(o);
  if (a.json) {
    std::cout << doctor::render_json(r).dump(2) << std::endl;
  } else {
    std::cout << doctor::render_table(r) << std::flush;
  }
  return r.exit_code();
}

}  // namespace

void add_doctor_command(CLI::App& app, Cli& cli) {
  auto a = std::make_shared<DoctorArgs>();
  auto* c = app.add_subcommand("doctor", "Check, host by host, whether the cluster is ready (exit 0 ready, 1 not)");
  c->add_option("-H,--hosts", a->hosts, "Hosts: host1,host2:2 (default: localhost)");
  c->add_option("--hostfile", a->hostfile, "Hostfile: 'host slots=N' or 'host:N' per line");
  c->add_option("--shared-dir", a->shared_dir, "Directory every host should share (absolute path)");
  c->add_option("--ports", a->ports, "Job ports to test between every pair: LO-HI, or 'ephemeral'")
      ->capture_default_str();
  c->add_flag("--json", a->json, "One JSON document instead of the table");
  c->add_flag("--quick", a->quick, "Skip the latency/bandwidth matrix");
  c->add_option("-p,--ssh-port", a->ssh.port, "ssh port");
  c->add_option("-i,--ssh-identity", a->ssh.identity, "ssh private key file");
  c->add_option("--ssh-option", a->ssh.options, "Extra ssh -o KEY=VALUE (repeatable)");
  c->add_option("--connect-timeout", a->connect_timeout_s, "ssh ConnectTimeout, seconds")->capture_default_str();
  c->add_option("--probe-timeout", a->probe_timeout_s,
                "Seconds a host has to answer (ssh login included) before it is reported dead")
      ->capture_default_str();
  c->add_flag("--probe", a->probe, "Internal: run as the remote probe")->group("");
  c->add_option("--probe-name", a->probe_name, "Internal")->group("");
  c->add_option("--probe-index", a->probe_index, "Internal")->group("");
  c->add_option("--probe-run", a->probe_run, "Internal")->group("");
  c->add_option("--probe-lifetime", a->probe_lifetime_s, "Internal")->group("");
  c->callback([&cli, a] { cli.run = [a] { return run_doctor_command(*a); }; });
}

}  // namespace hpct::cli
