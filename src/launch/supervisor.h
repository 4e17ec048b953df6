// Supervision of one job: start every spawner process, feed each the rank
// spec, relay output, and end the whole job as soon as one rank fails.
//
// Protocol (the wrapper's side is in rank_protocol.h):
//  1. Start each ProcessPlan as a child in its own process group that dies
//     with the launcher (PR_SET_PDEATHSIG=SIGTERM: wrappers stop their
//     programs gracefully, ssh closes its session, mpirun/srun end their
//     ranks). Write the spec on its stdin and keep stdin open.
//  2. Watch every stream. A rank is started when its S record arrives,
//     done when its X record arrives.
//  3. The job fails, first cause wins, when: a rank's X record says it
//     exited non-zero or died by a signal; a spawner process ends while some
//     of its ranks never reported an end (ssh lost the host, the wrapper
//     could not run); a rank has not started within the start timeout;
//     or the launcher gets SIGINT/SIGTERM/SIGHUP.
//  4. Stop: close every stdin (each wrapper SIGTERMs its program's group,
//     then SIGKILLs it after the grace period), SIGTERM the group spawners
//     (mpirun, srun) too; after grace + 2 s, SIGKILL every spawner process
//     group still alive. Every wait is bounded.
//  5. The job succeeds when every rank reported exit 0 and every spawner
//     process has ended.
// Blocking, single-threaded; call from the thread that lives for the whole
// job (PR_SET_PDEATHSIG follows the forking thread).
#pragma once

#include <deque>
#include <string>
#include <vector>

#include "core/clock.h"
#include "core/log.h"
#include "launch/output.h"
#include "launch/rank_protocol.h"
#include "launch/spawner.h"

namespace hpct::launch {

struct AttemptResult {
  bool ok = false;
  int exit_code = 0;          // for the launcher: the failed rank's code, 128+signal, ...
  int failed_rank = -1;       // -1 when no rank is to blame (interrupted)
  std::string summary;        // "rank 2 on host h2 exited with code 3"
  std::vector<std::string> tail;  // last stderr lines of the failed rank (or of its spawner)
  std::string tail_from;          // "rank 2's stderr", "its ssh session"
  int interrupted_by = 0;     // the signal that stopped the launcher, 0 if none
  Millis stop_time{0};        // from the failure to every process gone
};

struct SupervisorOptions {
  Millis start_timeout{30000};
  Millis grace{3000};
  int signal_fd = -1;  // readable when the launcher is asked to stop (signalfd)
};

class Supervisor {
 public:
  Supervisor(std::vector<ProcessPlan> plans, RankSpec base_spec, OutputMux& output,
             SupervisorOptions options, Logger logger);

  // Runs the job once, with HPCT_RESTART=restart, to its end. Io when a
  // spawner itself cannot be started (ssh or mpirun missing): the processes
  // already started are stopped first.
  AttemptResult run(int restart);

 private:
  struct Proc;
  struct RankState;
  struct Attempt;  // one run's processes, ranks and stop state (supervisor.cc)

  std::vector<ProcessPlan> plans_;
  RankSpec base_spec_;
  OutputMux& output_;
  SupervisorOptions options_;
  Logger logger_;
};

}  // namespace hpct::launch
