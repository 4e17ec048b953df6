// hpctrain: check a cluster, launch ranks, move data, train, benchmark.
//
// This executable does not link libtorch: loading libtorch's shared libraries
// and running their static initialisers costs ~1 s before main(), which every
// launch, rank wrapper and doctor probe would pay. The subcommands that need
// libtorch live in hpctrain-torch (torch_main.cc), built and installed next
// to this one; here they are forwarding subcommands (add_forwarded_command)
// that exec it with the same argv, so users see one command either way.
#include "cli_main.h"
#include "commands.h"

int main(int argc, char** argv) {
  using namespace hpct::cli;
  Cli state;
  CLI::App app{"hpctrain: distributed deep-learning training from one machine to a cluster"};
  add_config_command(app, state);
  CLI::App& bench = add_bench_command(app);
  add_bench_comm_command(bench, state);
  // Descriptions as in bench_*_command.cc / train_command.cc; cli_test checks they match.
  add_forwarded_command(
      bench, state, "engine",
      "A model's gradient list through the engine vs one raw allreduce of the same bytes",
      kTorchExecutable);
  add_forwarded_command(bench, state, "train",
                        "Data-parallel training speed of a built-in model (JSON)",
                        kTorchExecutable);
  add_forwarded_command(bench, state, "data",
                        "JPEG decode vs libjpeg-turbo, and loader thread scaling",
                        kTorchExecutable);
  add_bench_launch_command(bench, state);
  add_forwarded_command(bench, state, "ps",
                        "Gradient exchange of a gradient-heavy step: allreduce vs parameter servers",
                        kTorchExecutable);
  add_data_command(app, state);
  add_launch_command(app, state);
  add_doctor_command(app, state);
  add_cluster_command(app, state);
  add_rank_check_command(app, state);
  add_ps_server_command(app, state);
  add_report_command(app, state);
  add_top_command(app, state);
  add_why_command(app, state);
  add_plan_command(app, state);
  add_forwarded_command(app, state, "train",
                        "Train a model on WebDataset shards across the job's ranks",
                        kTorchExecutable, check_train_device);
  add_forwarded_command(app, state, "checkpoint", "Sharded checkpoints: consolidate into one file, inspect",
                        kTorchExecutable);
  return run_cli(app, state, argc, argv);
}
