// The main() shared by the hpctrain executables: hpctrain (no libtorch; the
// one users call) and hpctrain-torch (the subcommands that need libtorch,
// which hpctrain hands over to by exec). Each main() builds its App with its
// subcommands and calls run_cli, so both take the same root flags and turn
// errors into the same exit codes and one-line messages.
#pragma once

#include "commands.h"

namespace hpct::cli {

// Adds the root flags (--version, -v/--verbose, --set NAME=VALUE) to app,
// parses argv, then either hands the process to the executable a forwarded
// subcommand lives in (before reading any configuration, so that executable
// reads and reports it once) or reads HPCT_* from the environment, applies
// --set and runs the chosen subcommand. Returns the exit code: 0, 2 for a
// usage error, error_exit_code() for an hpct::Error, 70 for anything else.
// Error lines start with "hpctrain:" whichever executable prints them.
int run_cli(CLI::App& app, Cli& state, int argc, char** argv);

}  // namespace hpct::cli
