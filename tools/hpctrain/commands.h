// The hpctrain CLI: one file per subcommand, each adding itself to the root
// App. A subcommand's callback stores the work to run in Cli::run, so that
// run_cli (cli_main.h) runs it outside CLI11's parser and maps hpct::Error to
// exit codes. The subcommands that need libtorch live in a second executable,
// hpctrain-torch; hpctrain registers them with add_forwarded_command.
#pragma once

#include <CLI/CLI.hpp>
#include <functional>
#include <string>
#include <vector>
#include <string>

#include "core/config.h"

namespace hpct::cli {

struct Cli {
  Config config;             // HPCT_* from the environment, then --set flags
  bool verbose = false;      // print the effective configuration first
  std::function<int()> run;  // the chosen subcommand's work; returns the exit code
  // Set when the chosen subcommand lives in another executable: its file
  // name (next to this one) and the subcommand, for messages.
  std::string forward_to;
  std::string forward_command;
  // Checks of the forwarded arguments that need no libtorch, run before
  // the exec (train's --device cuda on a host without a GPU fails here, in
  // milliseconds, not after libtorch's ~1 s start). Throws to refuse.
  std::function<void(char** argv)> before_forward;
};

// The executable, next to hpctrain, holding the subcommands that need libtorch.
inline constexpr char kTorchExecutable[] = "hpctrain-torch";

// A forwarding subcommand, for one that runs in `executable`: it parses
// nothing itself (not even --help) and makes run_cli exec that executable
// with the same argv, so `hpctrain train --help` is `hpctrain-torch train
// --help`.
void add_forwarded_command(CLI::App& parent, Cli& cli, const std::string& name,
                           const std::string& description, const std::string& executable,
                           std::function<void(char** argv)> before_forward = nullptr);
// train's --device cuda[:N] (as `--device X` or `--device=X` in argv): the
// GPU is there, or InvalidArgument in one line naming the fix. Any other
// value is left to hpctrain-torch, which parses the flags.
void check_train_device(char** argv);
// Replaces this process with `executable` from this one's directory, argv
// unchanged. Throws Io (naming the path and the fix) when it cannot.
[[noreturn]] void exec_sibling(const std::string& executable, const std::string& command,
                               char** argv);

void add_config_command(CLI::App& app, Cli& cli);

// --ca-file, --cache-dir, --cache-size and --spool-memory, taken by every
// command that reads shards; they set HPCT_DATA_CA_FILE, HPCT_DATA_CACHE_DIR,
// HPCT_DATA_CACHE_SIZE and HPCT_DATA_SPOOL_MEMORY (core/config.h) when given.
struct SourceFlags {
  std::string ca_file;
  std::string cache_dir;
  std::string cache_size;
  std::string spool_memory;
};
void add_source_flags(CLI::App* command, SourceFlags* flags);
void apply_source_flags(const SourceFlags& flags, Config* config);
CLI::App& add_bench_command(CLI::App& app);            // the parent; add its subcommands next
// How the benchmarks start their own local ranks: mpirun with the flags a
// single small host needs (see shared/notes): oversubscription for np >
// cores, shared memory, yielding while idle, no binding; as root,
// --allow-run-as-root.
std::vector<std::string> local_mpirun_prefix(int np);
void add_data_command(CLI::App& app, Cli& cli);        // pack, inspect, verify, serve
void add_launch_command(CLI::App& app, Cli& cli);      // and the hidden launch-rank
void add_doctor_command(CLI::App& app, Cli& cli);      // and the hidden doctor --probe
void add_rank_check_command(CLI::App& app, Cli& cli);  // hidden test program
void add_train_command(CLI::App& app, Cli& cli);
void add_checkpoint_command(CLI::App& app, Cli& cli);  // hpctrain-torch: consolidate, inspect
void add_cluster_command(CLI::App& app, Cli& cli);    // setup, status
void add_ps_server_command(CLI::App& app, Cli& cli);  // hidden: launch --servers starts it
void add_report_command(CLI::App& app, Cli& cli);     // one HTML page of a run (src/report)
void add_top_command(CLI::App& app, Cli& cli);        // live view of a running job (metrics endpoints)
void add_why_command(CLI::App& app, Cli& cli);        // merge a failed job's flight records (src/why)
void add_plan_command(CLI::App& app, Cli& cli);       // and plan calibrate
void add_plan_calibrate_command(CLI::App* plan, Cli& cli);  // from add_plan_command
void add_plan_profile_command(CLI::App& app, Cli& cli);  // hidden, hpctrain-torch: calibrate's profile
// -np -> --np before parsing (CLI11 takes one letter after a single dash).
void rewrite_single_dash_options(int argc, char** argv);

// Subcommands of `bench`, each in its own file.
void add_bench_comm_command(CLI::App& bench, Cli& cli);
void add_bench_engine_command(CLI::App& bench, Cli& cli);
void add_bench_train_command(CLI::App& bench, Cli& cli);
void add_bench_data_command(CLI::App& bench, Cli& cli);
void add_bench_launch_command(CLI::App& bench, Cli& cli);
void add_bench_ps_command(CLI::App& bench, Cli& cli);

// Prints the effective configuration as a table (or JSON lines).
void print_config(const Config& config, bool json);

}  // namespace hpct::cli
