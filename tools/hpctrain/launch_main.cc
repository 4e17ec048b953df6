// hpctrain-launch: `hpctrain launch` in a binary that does not load libtorch.
//
// The full hpctrain links libtorch (and, through Debian's build, ~300 shared
// libraries); starting it costs about 0.5 s of CPU before main. A launcher,
// and above all the rank wrapper it starts for every rank, must not pay that:
// this binary holds only launch, the hidden launch-rank wrapper and the
// rank-check test program, with the same code and flags as hpctrain's.
// `hpctrain-launch -np 2 -- prog` is `hpctrain launch -np 2 -- prog`; both
// start their wrappers from this binary when it sits next to them.
#include <cstdio>
#include <cstring>
#include <vector>

#include "commands.h"
#include "core/env.h"
#include "core/error.h"
#include "core/log.h"

int main(int argc, char** argv) {
  using namespace hpct;
  cli::Cli state;
  try {
    state.config = Config::from_env(ProcessEnv());
  } catch (const Error& e) {
    std::fprintf(stderr, "hpctrain-launch: error (%s): %s\n", error_code_name(e.code()), e.what());
    return error_exit_code(e.code());
  }
  Logger log = Logger::from_config(state.config, -1);
  for (const auto& w : state.config.unknown_env_warnings()) log.warn("core", w);

  CLI::App app{"hpctrain-launch: hpctrain launch without libtorch (same flags)"};
  app.require_subcommand(1);
  cli::add_launch_command(app, state);
  cli::add_rank_check_command(app, state);

  // Without a subcommand name, the arguments are launch's.
  std::vector<char*> args(argv, argv + argc);
  static char launch[] = "launch";
  if (argc < 2 || (std::strcmp(argv[1], "launch") != 0 && std::strcmp(argv[1], "launch-rank") != 0 &&
                   std::strcmp(argv[1], "rank-check") != 0)) {
    args.insert(args.begin() + 1, launch);
  }
  int n = static_cast<int>(args.size());
  cli::rewrite_single_dash_options(n, args.data());
  try {
    app.parse(n, args.data());
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
  try {
    return state.run ? state.run() : 0;
  } catch (const Error& e) {
    std::fprintf(stderr, "hpctrain-launch: error (%s): %s\n", error_code_name(e.code()), e.what());
    return error_exit_code(e.code());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "hpctrain-launch: internal error: %s\n", e.what());
    return 70;
  }
}
