// hpctrain-torch: the hpctrain subcommands that need libtorch (train,
// checkpoint, bench engine|train|data). Users call them as `hpctrain train ...`: hpctrain,
// which does not load libtorch, execs this executable with the same argv
// (see main.cc). Their worker ranks start this executable directly.
#include "cli_main.h"
#include "commands.h"

int main(int argc, char** argv) {
  using namespace hpct::cli;
  Cli state;
  CLI::App app{
      "hpctrain-torch: the hpctrain subcommands that need libtorch; run them as `hpctrain ...`"};
  CLI::App& bench = add_bench_command(app);
  add_bench_engine_command(bench, state);
  add_bench_train_command(bench, state);
  add_bench_data_command(bench, state);
  add_bench_ps_command(bench, state);
  add_train_command(app, state);
  add_checkpoint_command(app, state);
  add_plan_profile_command(app, state);
  return run_cli(app, state, argc, argv);
}
