// Spawners: how the rank wrapper (rank_wrapper.h) gets started on each host.
//
// A Spawner only builds command lines (ProcessPlans); the supervisor starts
// them, feeds them the RankSpec and watches them, the same way for all. Four
// implementations, each in its own file: LocalSpawner (fork/exec here),
// SshSpawner (one ssh session per remote rank), MpirunSpawner (one
// mpirun for the whole job), SrunSpawner (one srun step). Plans are pure
// values, so each spawner's command line is unit-tested without running it.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "launch/placement.h"

namespace hpct::launch {

struct JobLayout {
  std::vector<RankPlacement> ranks;
  std::vector<bool> rank_is_local;  // by rank: run with fork/exec, never ssh
  std::string wrapper;              // absolute path of hpctrain; the same on every host
  std::string private_dir;          // 0700 directory on the shared file system (MPICH's spec file)
};

struct ProcessPlan {
  std::vector<std::string> argv;
  std::string via;         // "local", "ssh", "mpirun" or "srun", for messages
  std::string host;        // where it runs, for messages; "mpirun"/"srun" for group spawners
  std::vector<int> ranks;  // the ranks this process carries
  bool group = false;      // one process for all ranks: the spec leaves the rank to mpirun/srun
  std::string spec_file;   // non-empty: write the spec here (0600) rather than on stdin
};

class Spawner {
 public:
  virtual ~Spawner() = default;
  virtual const char* name() const = 0;
  // Thread-safe, pure. InvalidArgument when the layout cannot be started this way.
  virtual std::vector<ProcessPlan> plan(const JobLayout& job) const = 0;
};

// "launch-rank" and its arguments, as every spawner runs the wrapper.
std::vector<std::string> wrapper_command(const JobLayout& job, const std::string& spec_file = "");

// 'it'\''s' quoting for a POSIX shell (ssh hands the remote command to one).
std::string shell_quote(const std::string& word);

}  // namespace hpct::launch
