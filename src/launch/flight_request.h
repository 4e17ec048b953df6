// Asking a stopping rank's program for its flight record (docs/why.md).
//
// When the launcher stops a failed job, each rank wrapper first sends
// SIGUSR1 to the processes of its program's group that catch it (an
// hpctrain engine with a job directory installs that handler; a program
// that does not catch SIGUSR1 is never sent it, so it cannot die of it),
// and SIGCONT to those that are stopped (SIGSTOP, a debugger), so they can
// answer. It then waits, at most `wait`, until the record
// JOB_DIR/flight/rank-R.json is written, and leaves a note beside it
// (rank-R.wrapper.json: the process states it found and whether the record
// came) for `hpctrain why`, before it goes on with SIGTERM.
//
// Not thread-safe; used by the wrapper's loop.
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

#include "core/clock.h"

namespace hpct::launch {

// One process of a group, from /proc: its state letter (R, S, D, T, t, Z)
// and whether it catches SIGUSR1.
struct GroupProcess {
  pid_t pid = 0;
  char state = '?';
  bool catches_sigusr1 = false;
};
std::vector<GroupProcess> processes_in_group(pid_t group);

// Adds how the rank's program ended ("was killed by the kernel's
// out-of-memory killer ...") to its note (rank-R.wrapper.json, made when
// missing), for `hpctrain why`. Best effort, like the note itself.
void write_end_note(const std::string& job_dir, int rank, const std::string& host, const std::string& ended);

class FlightRequest {
 public:
  FlightRequest(std::string job_dir, int rank, std::string host, Millis wait);

  // Signals the group; returns false when no process catches SIGUSR1
  // (nothing to wait for; the note is written).
  bool start(pid_t group);
  // The record was written since start(), or the wait is over.
  bool done() const;
  // Writes the note; `program_ended`: the program ended while it waited.
  void finish(bool program_ended);

  std::string record_path() const;

 private:
  bool record_written() const;

  const std::string job_dir_;
  const int rank_;
  const std::string host_;
  const Millis wait_;
  std::vector<GroupProcess> found_;
  long long signalled_ns_ = 0;  // Unix time of the signal
  SteadyClock::time_point deadline_{};
  bool finished_ = false;
};

}  // namespace hpct::launch
