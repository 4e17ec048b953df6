// `hpctrain bench ...`: the parent command; each benchmark adds itself from
// its own file (bench_comm_command.cc, ...), in hpctrain or hpctrain-torch.
#include <unistd.h>

#include "commands.h"

namespace hpct::cli {

std::vector<std::string> local_mpirun_prefix(int np) {
  std::vector<std::string> argv = {"mpirun", "-np", std::to_string(np), "--oversubscribe",
                                   "--mca", "btl", "self,vader", "--mca", "mpi_yield_when_idle", "1",
                                   "--bind-to", "none"};
  if (::geteuid() == 0) argv.push_back("--allow-run-as-root");
  return argv;
}

CLI::App& add_bench_command(CLI::App& app) {
  auto* bench = app.add_subcommand("bench", "Measure speed and scaling, as JSON lines");
  bench->require_subcommand(1);
  return *bench;
}

}  // namespace hpct::cli
