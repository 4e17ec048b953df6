// `hpctrain bench ...`: the parent command; each benchmark adds itself from
// its own file (bench_comm_command.cc, ...), in hpctrain or hpctrain-torch.
#include "commands.h"

namespace hpct::cli {

CLI::App& add_bench_command(CLI::App& app) {
  auto* bench = app.add_subcommand("bench", "Measure speed and scaling, as JSON lines");
  bench->require_subcommand(1);
  return *bench;
}

}  // namespace hpct::cli
