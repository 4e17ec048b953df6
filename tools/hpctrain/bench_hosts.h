// The launcher's host options for the benchmarks (`bench comm`, `bench
// train`): -H, --hostfile, -i, --ssh-option, --spawner, --network-interface.
// With any of them given, a benchmark starts its ranks through `hpctrain
// launch` with the same options (as the OSU and nccl-tests benchmarks run
// under mpirun); inside a job already started by hpctrain launch, mpirun or
// srun, it runs as one rank of it.
#pragma once

#include <CLI/CLI.hpp>
#include <map>
#include <string>
#include <vector>

namespace hpct::cli {

struct BenchHosts {
  std::string hosts;      // -H host1:1,host2:1
  std::string hostfile;
  std::string spawner;    // empty: the launcher's auto
  std::string identity;   // -i
  std::vector<std::string> ssh_options;
  std::string network_interface;

  bool any() const { return !hosts.empty() || !hostfile.empty() || !spawner.empty(); }
  // `self launch <these options> [--np N] --backend B [--env ...] --` ; np 0:
  // every slot of the hosts.
  std::vector<std::string> launch_prefix(int np, const std::string& backend,
                                         const std::map<std::string, std::string>& env) const;
};

void add_bench_host_options(CLI::App* c, BenchHosts* h);

// True when this process is a rank of a job (hpctrain launch, mpirun, srun
// step) rather than a user's shell.
bool running_inside_a_job();

}  // namespace hpct::cli
