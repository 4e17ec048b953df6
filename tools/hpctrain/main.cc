// hpctrain: check a cluster, launch ranks, move data, train, benchmark.
#include <cstdio>
#include <exception>
#include <iostream>

#include "commands.h"
#include "core/env.h"
#include "core/error.h"
#include "core/log.h"
#include "version.h"

int main(int argc, char** argv) {
  using namespace hpct;
  cli::Cli state;
  try {
    state.config = Config::from_env(ProcessEnv());
  } catch (const Error& e) {
    std::fprintf(stderr, "hpctrain: error (%s): %s\n", error_code_name(e.code()), e.what());
    return error_exit_code(e.code());
  }
  Logger log = Logger::from_config(state.config, -1);
  for (const auto& w : state.config.unknown_env_warnings()) log.warn("core", w);

  CLI::App app{"hpctrain: distributed deep-learning training from one machine to a cluster"};
  app.require_subcommand(1);
  app.set_version_flag("--version", std::string("hpctrain ") + HPCT_VERSION + " (" + HPCT_GIT + ")");
  app.add_flag("-v,--verbose", state.verbose, "Print the effective configuration before running");
  std::vector<std::string> sets;
  app.add_option("--set", sets, "Override a setting: --set HPCT_TIMEOUT_S=60 (see `hpctrain config`)")
      ->type_name("NAME=VALUE");
  cli::add_config_command(app, state);
  cli::add_bench_command(app, state);
  cli::add_data_command(app, state);
  cli::add_launch_command(app, state);
  cli::add_doctor_command(app, state);
  cli::add_rank_check_command(app, state);
  cli::add_train_command(app, state);

  cli::rewrite_single_dash_options(argc, argv);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
  try {
    for (const auto& s : sets) {
      auto eq = s.find('=');
      if (eq == std::string::npos) {
        throw_invalid_argument("--set " + s + ": expected NAME=VALUE, e.g. --set HPCT_TIMEOUT_S=60");
      }
      state.config.set(s.substr(0, eq), s.substr(eq + 1), ConfigSource::kFlag);
    }
    if (state.verbose) cli::print_config(state.config, false);
    return state.run ? state.run() : 0;
  } catch (const Error& e) {
    std::fprintf(stderr, "hpctrain: error (%s): %s\n", error_code_name(e.code()), e.what());
    return error_exit_code(e.code());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "hpctrain: internal error: %s\n", e.what());
    return 70;
  }
}
