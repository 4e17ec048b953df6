// Starting a child process with pipes, for the launcher (wrappers, ssh,
// mpirun, srun) and for the rank wrapper (the user's program).
//
// The child gets its own process group (so it and everything it starts can
// be signalled at once), dies with the thread that forked it
// (PR_SET_PDEATHSIG: the kernel sends the signal when the forking *thread*
// exits, so fork from a thread that outlives the child, e.g. main), and
// starts with every signal unblocked and default dispositions, whatever the
// parent blocked or ignored. Blocking only while starting; thread-safe.
#pragma once

#include <sys/types.h>

#include <functional>
#include <map>
#include <string>
#include <vector>

#include "core/clock.h"
#include "core/fd.h"
#include "launch/rank_protocol.h"

namespace hpct::launch {

struct ChildOptions {
  std::vector<std::string> argv;           // argv[0] is looked up in PATH
  std::map<std::string, std::string> env;  // added to (or overriding) this process's environment
  std::vector<std::string> unset_env;      // removed from it
  std::string cwd;                         // empty: this process's
  bool pipe_stdin = true;                  // false: /dev/null
  int inherit_fd = -1;                     // an extra descriptor the child keeps open, same number
  int death_signal = 9;                    // PR_SET_PDEATHSIG; 0: none
  // A cgroup's cgroup.procs: the child moves itself there before exec, so
  // the cgroup's limit holds from the program's first page (memory_cgroup.h).
  std::string cgroup_procs;
};

struct Child {
  pid_t pid = -1;       // also the process group id
  UniqueFd stdin_fd;    // write end (when piped)
  UniqueFd stdout_fd;   // read end
  UniqueFd stderr_fd;   // read end
};

// A started child whose stdout and stderr are read as lines until both
// close: what the supervisors (supervisor.cc, elastic_supervisor.cc) keep of
// each process they watch. Not thread-safe.
struct WatchedChild {
  Child child;
  LineSplitter out_lines, err_lines;
  bool out_open = true, err_open = true;
  bool exited = false;
  int status = 0;
  SteadyClock::time_point exited_at{};
  // Ended and its streams drained, or given 1 s for descendants to let go.
  bool finished() const {
    return exited && ((!out_open && !err_open) || SteadyClock::now() - exited_at > Millis(1000));
  }
  // Reads what one stream (stderr when is_err) holds now, at most 16 reads
  // of 64 KiB, and calls on_line for each line; at its end, the unterminated
  // tail too, and the stream is marked closed. Never blocks (the pipes are
  // non-blocking).
  void drain(bool is_err, const std::function<void(const std::string&)>& on_line);
};

// Io naming the program when it cannot be started (not found, not
// executable, bad cwd); the child is reaped in that case. All returned
// descriptors are close-on-exec and non-blocking.
Child start_child(const ChildOptions& options);

// Waits without blocking: true with *status set when pid has ended.
bool reap(pid_t pid, int* status);

// "exited with code N" or "was killed by signal N", for a waitpid status.
std::string describe_status(int status);

}  // namespace hpct::launch
