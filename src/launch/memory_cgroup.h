// Memory cgroups for `hpctrain launch --memory-per-rank`, and how a rank
// killed by SIGKILL is traced to the kernel's out-of-memory killer.
//
// Which hierarchy: cgroup v1's `memory` hierarchy when this host mounts one,
// else cgroup v2 when its cgroup.controllers lists `memory`. A job's cgroups
// are
//   <base>/hpctrain-<job id>/rank-<R>
// where <base> is, under v1, the memory cgroup the launcher (or, on another
// host, the rank wrapper) runs in, so a container's or Slurm's limit still
// bounds the ranks; under v2 the top of the mount, because a v2 cgroup that
// holds processes (the launcher's own) cannot hand the memory controller to
// children. Each rank's cgroup gets the limit with swap shut out, so swap
// cannot stretch it: v1 memory.limit_in_bytes and memory.memsw.limit_in_bytes
// (memory.swappiness 0 where swap is not accounted); v2 memory.max,
// memory.swap.max 0 and memory.oom.group 1 (an OOM kill ends the whole rank).
//
// Who does what: the rank wrapper creates its rank's cgroup on the rank's
// host and the program enters it between fork and exec (ChildOptions::
// cgroup_procs), so every page the program touches is charged; the wrapper
// removes it once the program's processes are gone. The launcher creates the
// job folder on its own host before any rank starts (the check that cgroups
// can be used at all, refused with one line naming the fix) and removes
// whatever is left at its end, failure and Ctrl-C included.
//
// The OOM killer counts its kills in the victim's cgroup (v1
// memory.oom_control `oom_kill`, v2 memory.events `oom_kill`). A rank with no
// --memory-per-rank is watched in the cgroup it started in (Slurm's, a
// container's, the machine's): its counter at spawn against its counter at
// the end.
//
// The parsers are pure functions of the files' text (unit-tested); the rest
// reads and writes /proc and the cgroup file system.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <string>

namespace hpct::launch {

// --memory-per-rank's value: "2G", "1500M", "1.5G", "2147483648" (K, M, G, T
// are powers of 1024). InvalidArgument naming the option and the fix.
std::uint64_t parse_memory_per_rank(const std::string& text);

// "2147483648 bytes (2.00 GiB)".
std::string describe_limit(std::uint64_t bytes);

// Where the memory controller's hierarchy is mounted.
struct MemoryHierarchy {
  int version = 0;          // 1 or 2; 0: none
  std::string mount_point;  // e.g. /sys/fs/cgroup/memory (v1), /sys/fs/cgroup (v2)
  std::string mount_root;   // the hierarchy path shown at the mount point ("/" unless bind-mounted)
};

// From /proc/self/mountinfo's text: the v1 `memory` mount, else the first
// cgroup2 mount (whether it offers memory is checked on the files).
MemoryHierarchy parse_mountinfo(const std::string& mountinfo);

// A process's cgroup path in that hierarchy, from /proc/PID/cgroup's text
// ("4:memory:/a/b" for v1, "0::/a/b" for v2); "" when not listed.
std::string parse_proc_cgroup(const std::string& proc_cgroup, int version);

// The directory of cgroup `path` under the mount; "" when the mount does
// not show it.
std::string cgroup_directory(const MemoryHierarchy& h, const std::string& path);

// The value of `key` in a flat-keyed file ("oom_kill 3" lines).
std::optional<std::uint64_t> keyed_value(const std::string& text, const std::string& key);

// A limit file's value (memory.limit_in_bytes, memory.max); 0 for none
// ("max", or v1's "unlimited" near 2^63).
std::uint64_t parse_limit(const std::string& text);

// This host's memory hierarchy, or version 0 when it mounts none that offers
// the memory controller.
MemoryHierarchy memory_hierarchy();

// A rank's memory cgroup as seen when it started.
struct MemoryWatch {
  MemoryHierarchy hierarchy;
  std::string dir;             // "" when none could be found
  std::uint64_t limit = 0;     // the smallest limit of it and its ancestors; 0: none
  std::uint64_t oom_kills_at_start = 0;
  bool made_for_rank = false;  // hpctrain created it (--memory-per-rank)
};

// What the OOM killer did to a rank.
struct OomVerdict {
  std::uint64_t limit = 0;     // 0: no cgroup limit (the host ran out)
  std::string cgroup;          // the cgroup's directory
  bool made_for_rank = false;
};

// The memory cgroup pid runs in now (best effort: dir "" when unknown).
MemoryWatch watch_memory_of(pid_t pid);

// Whether the OOM killer has killed in the watched cgroup since the watch began.
std::optional<OomVerdict> oom_kill_since(const MemoryWatch& watch);

// The job's folder on this host (<base>/hpctrain-<job id>), made if missing,
// with the memory controller enabled for its children. InvalidArgument (no
// controller) or Io (not permitted) in one line that names the fix.
std::string make_job_cgroup(const MemoryHierarchy& h, const std::string& job_id);

// Kills every process left in `dir` and its children, removes them, waiting
// at most 2 s for the processes to go. Best effort; false when something stayed.
bool remove_cgroup_tree(const std::string& dir);

// The launcher's hold on the job's cgroup folder on its own host: made
// (refusing as make_job_cgroup does) before any rank starts, removed with
// everything in it when the launch ends, however it ends. Also removes the
// folders of launchers that died outright (their pid is in the name).
class JobMemoryCgroups {
 public:
  explicit JobMemoryCgroups(const std::string& job_id);
  ~JobMemoryCgroups();
  JobMemoryCgroups(const JobMemoryCgroups&) = delete;
  JobMemoryCgroups& operator=(const JobMemoryCgroups&) = delete;
  const std::string& dir() const { return dir_; }

 private:
  std::string dir_;
};

// One rank's cgroup, made by the rank wrapper before the program starts and
// removed (processes left in it killed) when this object goes.
class RankMemoryCgroup {
 public:
  RankMemoryCgroup(const std::string& job_id, int rank, std::uint64_t limit);
  ~RankMemoryCgroup();
  RankMemoryCgroup(const RankMemoryCgroup&) = delete;
  RankMemoryCgroup& operator=(const RankMemoryCgroup&) = delete;

  std::string procs_file() const { return watch_.dir + "/cgroup.procs"; }
  const MemoryWatch& watch() const { return watch_; }

 private:
  MemoryWatch watch_;
  std::string job_dir_;
};

}  // namespace hpct::launch
