#include "bench_hosts.h"

#include <filesystem>

#include "core/env.h"
#include "core/subprocess.h"
#include "core/world.h"

namespace hpct::cli {

std::vector<std::string> BenchHosts::launch_prefix(
    int np, const std::string& backend, const std::map<std::string, std::string>& env) const {
  // launch lives in hpctrain, beside hpctrain-torch (which runs bench train).
  const auto launcher = std::filesystem::path(self_executable()).parent_path() / "hpctrain";
  std::vector<std::string> argv = {launcher.string(), "launch", "--prefix", "none"};
  if (!hosts.empty()) argv.insert(argv.end(), {"-H", hosts});
  if (!hostfile.empty()) argv.insert(argv.end(), {"--hostfile", hostfile});
  if (!spawner.empty()) argv.insert(argv.end(), {"--spawner", spawner});
  if (!identity.empty()) argv.insert(argv.end(), {"-i", identity});
  for (const auto& o : ssh_options) argv.insert(argv.end(), {"--ssh-option", o});
  if (!network_interface.empty()) {
    argv.insert(argv.end(), {"--network-interface", network_interface});
  }
  if (np > 0) argv.insert(argv.end(), {"--np", std::to_string(np)});
  argv.insert(argv.end(), {"--backend", backend});
  for (const auto& [k, v] : env) argv.insert(argv.end(), {"--env", k + "=" + v});
  argv.push_back("--");
  return argv;
}

void add_bench_host_options(CLI::App* c, BenchHosts* h) {
  const char* g = "Hosts (as hpctrain launch)";
  c->add_option("-H,--hosts", h->hosts, "Run across these hosts: host1:1,host2:1")->group(g);
  c->add_option("--hostfile", h->hostfile, "Run across the hosts of this hostfile")->group(g);
  c->add_option("--spawner", h->spawner, "How hpctrain launch starts ranks: local, ssh, mpirun, srun")
      ->group(g);
  c->add_option("-i,--ssh-identity", h->identity, "ssh private key file")->group(g);
  c->add_option("--ssh-option", h->ssh_options, "Extra ssh -o KEY=VALUE (repeatable)")->group(g);
  c->add_option("--network-interface", h->network_interface,
                "Interface the ranks bind to (eth0); default: towards the launcher")
      ->group(g);
}

bool running_inside_a_job() {
  return discover_world(ProcessEnv()).launcher != Launcher::kNone;
}

}  // namespace hpct::cli
