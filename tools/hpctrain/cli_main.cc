#include "cli_main.h"

#include <cstdio>
#include <cstring>
#include <exception>

#include "core/env.h"
#include "core/error.h"
#include "core/log.h"
#include "version.h"

namespace hpct::cli {
namespace {

void print_error(const Error& e) {
  std::fprintf(stderr, "hpctrain: error (%s): %s\n", error_code_name(e.code()), e.what());
}

void apply_sets(const std::vector<std::string>& sets, Config& config) {
  for (const auto& s : sets) {
    auto eq = s.find('=');
    if (eq == std::string::npos) {
      throw_invalid_argument("--set " + s + ": expected NAME=VALUE, e.g. --set HPCT_TIMEOUT_S=60");
    }
    config.set(s.substr(0, eq), s.substr(eq + 1), ConfigSource::kFlag);
  }
}

}  // namespace

void rewrite_single_dash_options(int argc, char** argv) {
  // mpirun users type -np; CLI11 takes only one letter after a single dash.
  static char np[] = "--np";
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--") == 0) break;
    if (std::strcmp(argv[i], "-np") == 0) argv[i] = np;
  }
}

int run_cli(CLI::App& app, Cli& state, int argc, char** argv) {
  app.require_subcommand(1);
  app.set_version_flag("--version",
                       std::string("hpctrain ") + HPCT_VERSION + " (" + HPCT_GIT + ")");
  app.add_flag("-v,--verbose", state.verbose, "Print the effective configuration before running");
  std::vector<std::string> sets;
  app.add_option("--set", sets,
                 "Override a setting: --set HPCT_TIMEOUT_S=60 (see `hpctrain config`)")
      ->type_name("NAME=VALUE");

  rewrite_single_dash_options(argc, argv);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
  try {
    if (!state.forward_to.empty()) {
      if (state.before_forward) state.before_forward(argv);
      exec_sibling(state.forward_to, state.forward_command, argv);  // returns only by throwing
    }
    state.config = Config::from_env(ProcessEnv());
    Logger log = Logger::from_config(state.config, -1);
    for (const auto& w : state.config.unknown_env_warnings()) log.warn("core", w);
    apply_sets(sets, state.config);
    if (state.verbose) print_config(state.config, false);
    return state.run ? state.run() : 0;
  } catch (const Error& e) {
    print_error(e);
    return error_exit_code(e.code());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "hpctrain: internal error: %s\n", e.what());
    return 70;
  }
}

}  // namespace hpct::cli
