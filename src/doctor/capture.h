// Runs a short command and keeps its output, bounded in time: mpirun
// --version on a probe, ssh -G and ssh-keygen -F on the head. Blocks up to
// `timeout`; thread-safe.
#pragma once

#include <string>
#include <vector>

#include "core/clock.h"

namespace hpct::doctor {

struct Captured {
  bool finished = false;  // false: it could not start or outlived the bound (then killed)
  int exit_code = -1;     // when finished: its exit status (128 + N for signal N)
  std::string out;        // stdout and stderr, at most 64 KiB
};

Captured capture_command(const std::vector<std::string>& argv, Millis timeout);

}  // namespace hpct::doctor
