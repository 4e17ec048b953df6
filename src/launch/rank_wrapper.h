// The rank wrapper: `hpctrain launch-rank`, the process every spawner starts
// on the rank's host. It reads the RankSpec the launcher sends, starts the
// user's program with the job's environment, relays its output as records,
// and ends it when the launcher says stop or goes away. The protocol is in
// rank_protocol.h.
#pragma once

#include <string>

#include "core/clock.h"

namespace hpct::launch {

struct RankWrapperOptions {
  // Read the spec from this file instead of stdin (MPICH forwards stdin to
  // rank 0 only); stdin is still watched for teardown when it is a pipe.
  std::string spec_file;
  Millis spec_timeout{60000};  // the launcher writes the spec at once; this only bounds a broken one
};

// Runs one rank to its end and returns the wrapper's exit code: the
// program's (128+n when a signal ended it, 127 when it could not start).
// Blocks; call from the main thread (the program dies with the thread that
// forked it). Installs a signalfd for SIGTERM/SIGINT/SIGHUP and ignores
// SIGPIPE for the rest of the process.
int run_rank_wrapper(const RankWrapperOptions& options);

}  // namespace hpct::launch
