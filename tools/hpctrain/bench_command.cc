// `hpctrain bench ...`: the parent command; each benchmark adds itself from
// its own file (bench_comm_command.cc, ...).
#include "commands.h"

namespace hpct::cli {

void add_bench_command(CLI::App& app, Cli& cli) {
  auto* bench = app.add_subcommand("bench", "Measure speed and scaling, as JSON lines");
  bench->require_subcommand(1);
  add_bench_comm_command(*bench, cli);
  add_bench_engine_command(*bench, cli);
  add_bench_train_command(*bench, cli);
  add_bench_data_command(*bench, cli);
  add_bench_launch_command(*bench, cli);
}

}  // namespace hpct::cli
