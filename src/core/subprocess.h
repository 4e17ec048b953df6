// Runs a child command to completion with a time bound.
//
// Used by the CLI to start helper jobs (mpirun for the benchmarks). The child
// gets its own process group; when the bound runs out the whole group gets
// SIGTERM, then SIGKILL after a grace period, so nothing it started outlives
// it. Blocks the calling thread; thread-safe (no shared state).
#pragma once

#include <map>
#include <string>
#include <vector>

#include "core/clock.h"

namespace hpct {

struct SubprocessResult {
  int exit_code = 0;   // valid when signal == 0
  int signal = 0;      // the signal that ended the child, 0 if it exited
  bool timed_out = false;
};

// argv[0] is looked up in PATH. extra_env is added to (or overrides) this
// process's environment. stdout and stderr are inherited. Io when the
// command cannot be started (naming it).
SubprocessResult run_subprocess(const std::vector<std::string>& argv,
                                const std::map<std::string, std::string>& extra_env,
                                Millis timeout, Millis grace = Millis(3000));

// "mpirun -np 2 ..." for messages.
std::string join_command(const std::vector<std::string>& argv);

// The absolute path of the running executable (/proc/self/exe).
std::string self_executable();

}  // namespace hpct
