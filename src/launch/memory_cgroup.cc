#include "launch/memory_cgroup.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <thread>
#include <vector>

#include "core/clock.h"
#include "core/error.h"
#include "core/units.h"

namespace hpct::launch {
namespace {

// Limits at or above this are v1's "unlimited" (PAGE_COUNTER_MAX pages).
constexpr std::uint64_t kUnlimited = std::uint64_t{1} << 62;
constexpr std::uint64_t kSmallestLimit = 16u << 20;  // below this no program starts
constexpr const char* kFix = "run hpctrain launch as root, or drop --memory-per-rank";

std::optional<std::string> read_text(const std::string& path) {
  std::ifstream f(path);
  if (!f) return std::nullopt;
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// 0, or the errno of the open or write.
int write_text(const std::string& path, const std::string& value) {
  int fd = ::open(path.c_str(), O_WRONLY | O_CLOEXEC);
  if (fd < 0) return errno;
  int err = 0;
  if (::write(fd, value.data(), value.size()) != static_cast<ssize_t>(value.size())) err = errno ? errno : EIO;
  ::close(fd);
  return err;
}

bool exists(const std::string& path) { return ::access(path.c_str(), F_OK) == 0; }

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  std::string item;
  std::stringstream ss(s);
  while (std::getline(ss, item, sep)) out.push_back(item);
  return out;
}

bool has_word(const std::string& list, const std::string& word, char sep) {
  for (const auto& w : split(list, sep)) {
    if (w == word) return true;
  }
  return false;
}

std::string parent_of(const std::string& dir) {
  auto slash = dir.rfind('/');
  return slash == std::string::npos || slash == 0 ? "/" : dir.substr(0, slash);
}

// The limit file of a cgroup directory under its hierarchy's version.
std::uint64_t limit_of(int version, const std::string& dir) {
  auto text = read_text(dir + (version == 1 ? "/memory.limit_in_bytes" : "/memory.max"));
  return text ? parse_limit(*text) : 0;
}

std::uint64_t oom_kills_of(int version, const std::string& dir) {
  auto text = read_text(dir + (version == 1 ? "/memory.oom_control" : "/memory.events"));
  return text ? keyed_value(*text, "oom_kill").value_or(0) : 0;
}

// The smallest limit of dir and its ancestors up to the mount.
std::uint64_t effective_limit(const MemoryHierarchy& h, std::string dir) {
  std::uint64_t limit = 0;
  while (true) {
    const std::uint64_t l = limit_of(h.version, dir);
    if (l != 0 && (limit == 0 || l < limit)) limit = l;
    if (dir.size() <= h.mount_point.size() || dir.rfind(h.mount_point, 0) != 0) break;
    dir = parent_of(dir);
  }
  return limit;
}

// "cannot create the memory cgroup DIR: Permission denied; run ... as root, or ...".
[[noreturn]] void refuse(const std::string& what, int err) {
  const std::string fix = (err == EACCES || err == EPERM || err == EROFS)
                              ? std::string("; --memory-per-rank needs root (or a cgroup delegated to this user): ") + kFix
                              : std::string("; ") + kFix;
  throw Error(ErrorCode::kIo, "--memory-per-rank: " + what + ": " + std::strerror(err) + fix);
}

// Under v2 a cgroup's children get the memory controller only when it is
// listed in the cgroup's cgroup.subtree_control.
void enable_memory_for_children(const std::string& dir) {
  auto control = read_text(dir + "/cgroup.subtree_control");
  if (control && has_word(std::string(control->substr(0, control->find('\n'))), "memory", ' ')) return;
  if (int err = write_text(dir + "/cgroup.subtree_control", "+memory")) {
    refuse("cannot hand the memory controller to the children of " + dir +
               (err == EBUSY ? " (it holds processes: cgroup v2 allows that only at the top)" : ""),
           err);
  }
}

std::vector<pid_t> pids_in(const std::string& dir) {
  std::vector<pid_t> pids;
  if (auto text = read_text(dir + "/cgroup.procs")) {
    for (const auto& line : split(*text, '\n')) {
      if (!line.empty()) pids.push_back(static_cast<pid_t>(std::atol(line.c_str())));
    }
  }
  return pids;
}

std::vector<std::string> child_dirs(const std::string& dir) {
  std::vector<std::string> out;
  if (DIR* d = ::opendir(dir.c_str())) {
    while (dirent* e = ::readdir(d)) {
      std::string name = e->d_name;
      if (name != "." && name != ".." && e->d_type == DT_DIR) out.push_back(dir + "/" + name);
    }
    ::closedir(d);
  }
  return out;
}

// Folders of launchers that died outright (hpctrain-launch-<pid>-...), empty
// of processes, under base.
void remove_abandoned_job_cgroups(const std::string& base) {
  for (const auto& dir : child_dirs(base)) {
    const std::string name = dir.substr(dir.rfind('/') + 1);
    const std::string prefix = "hpctrain-launch-";
    if (name.rfind(prefix, 0) != 0) continue;
    const long pid = std::strtol(name.c_str() + prefix.size(), nullptr, 10);
    if (pid > 0 && ::kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH) remove_cgroup_tree(dir);
  }
}

// The base a job folder goes under (see the header).
std::string job_cgroup_base(const MemoryHierarchy& h) {
  if (h.version == 2) return h.mount_point;
  const std::string own = cgroup_directory(h, parse_proc_cgroup(read_text("/proc/self/cgroup").value_or(""), 1));
  if (own.empty()) {
    throw_invalid_argument("--memory-per-rank: this process's memory cgroup is not visible under " +
                           h.mount_point + "; " + kFix);
  }
  return own;
}

}  // namespace

std::uint64_t parse_memory_per_rank(const std::string& text) {
  std::uint64_t bytes = 0;
  try {
    bytes = parse_bytes(text);
  } catch (const Error& e) {
    throw_invalid_argument("--memory-per-rank " + text + ": " + e.what());
  }
  if (bytes < kSmallestLimit) {
    throw_invalid_argument("--memory-per-rank " + text + ": " + std::to_string(bytes) +
                           " bytes is too small for any rank; give at least 16M, e.g. 2G");
  }
  return bytes;
}

std::string describe_limit(std::uint64_t bytes) {
  char gib[32];
  std::snprintf(gib, sizeof gib, "%.2f GiB", static_cast<double>(bytes) / (1024.0 * 1024 * 1024));
  return std::to_string(bytes) + " bytes (" + gib + ")";
}

MemoryHierarchy parse_mountinfo(const std::string& mountinfo) {
  MemoryHierarchy v1, v2;
  for (const auto& line : split(mountinfo, '\n')) {
    // id parent major:minor root mount-point options [optional...] - fstype source super-options
    const auto dash = line.find(" - ");
    if (dash == std::string::npos) continue;
    const auto head = split(line.substr(0, dash), ' ');
    const auto tail = split(line.substr(dash + 3), ' ');
    if (head.size() < 5 || tail.size() < 3) continue;
    if (tail[0] == "cgroup" && v1.version == 0 && has_word(tail[2], "memory", ',')) {
      v1 = MemoryHierarchy{1, head[4], head[3]};
    } else if (tail[0] == "cgroup2" && v2.version == 0) {
      v2 = MemoryHierarchy{2, head[4], head[3]};
    }
  }
  return v1.version != 0 ? v1 : v2;
}

std::string parse_proc_cgroup(const std::string& proc_cgroup, int version) {
  for (const auto& line : split(proc_cgroup, '\n')) {
    const auto first = line.find(':');
    const auto second = first == std::string::npos ? first : line.find(':', first + 1);
    if (second == std::string::npos) continue;
    const std::string controllers = line.substr(first + 1, second - first - 1);
    const bool match = version == 2 ? (line.compare(0, first, "0") == 0 && controllers.empty())
                                    : has_word(controllers, "memory", ',');
    if (match) return line.substr(second + 1);
  }
  return "";
}

std::string cgroup_directory(const MemoryHierarchy& h, const std::string& path) {
  if (h.version == 0 || path.empty() || path[0] != '/') return "";
  std::string rel;
  if (h.mount_root == "/") {
    rel = path;
  } else if (path == h.mount_root) {
    rel = "/";
  } else if (path.rfind(h.mount_root + "/", 0) == 0) {
    rel = path.substr(h.mount_root.size());
  } else {
    return "";
  }
  return rel == "/" ? h.mount_point : h.mount_point + rel;
}

std::optional<std::uint64_t> keyed_value(const std::string& text, const std::string& key) {
  for (const auto& line : split(text, '\n')) {
    if (line.size() > key.size() && line.compare(0, key.size(), key) == 0 && line[key.size()] == ' ') {
      return std::strtoull(line.c_str() + key.size() + 1, nullptr, 10);
    }
  }
  return std::nullopt;
}

std::uint64_t parse_limit(const std::string& text) {
  if (text.rfind("max", 0) == 0) return 0;
  const std::uint64_t v = std::strtoull(text.c_str(), nullptr, 10);
  return v >= kUnlimited ? 0 : v;
}

MemoryHierarchy memory_hierarchy() {
  MemoryHierarchy h = parse_mountinfo(read_text("/proc/self/mountinfo").value_or(""));
  if (h.version == 2) {
    auto controllers = read_text(h.mount_point + "/cgroup.controllers").value_or("");
    if (!has_word(controllers.substr(0, controllers.find('\n')), "memory", ' ')) return {};
  }
  return h;
}

MemoryWatch watch_memory_of(pid_t pid) {
  MemoryWatch w;
  w.hierarchy = memory_hierarchy();
  if (w.hierarchy.version == 0) return w;
  auto text = read_text("/proc/" + std::to_string(pid) + "/cgroup");
  w.dir = cgroup_directory(w.hierarchy, parse_proc_cgroup(text.value_or(""), w.hierarchy.version));
  if (w.dir.empty()) return w;
  w.limit = effective_limit(w.hierarchy, w.dir);
  w.oom_kills_at_start = oom_kills_of(w.hierarchy.version, w.dir);
  return w;
}

std::optional<OomVerdict> oom_kill_since(const MemoryWatch& watch) {
  if (watch.dir.empty()) return std::nullopt;
  if (oom_kills_of(watch.hierarchy.version, watch.dir) <= watch.oom_kills_at_start) return std::nullopt;
  return OomVerdict{watch.limit, watch.dir, watch.made_for_rank};
}

std::string make_job_cgroup(const MemoryHierarchy& h, const std::string& job_id) {
  if (h.version == 0) {
    throw_invalid_argument("--memory-per-rank needs the kernel's memory cgroup controller, and this host mounts "
                           "none (no cgroup v1 'memory' hierarchy, no cgroup2 offering 'memory'): mount one, or "
                           "drop --memory-per-rank");
  }
  const std::string base = job_cgroup_base(h);
  if (h.version == 2) enable_memory_for_children(base);
  const std::string dir = base + "/hpctrain-" + job_id;
  if (::mkdir(dir.c_str(), 0755) != 0 && errno != EEXIST) refuse("cannot create the memory cgroup " + dir, errno);
  if (h.version == 2) enable_memory_for_children(dir);
  return dir;
}

bool remove_cgroup_tree(const std::string& dir) {
  for (const auto& child : child_dirs(dir)) remove_cgroup_tree(child);
  const Deadline deadline(Millis(2000));
  while (true) {
    for (pid_t pid : pids_in(dir)) {
      if (pid > 0) ::kill(pid, SIGKILL);
    }
    if (::rmdir(dir.c_str()) == 0 || errno == ENOENT) return true;
    if (errno != EBUSY || deadline.expired()) return false;
    std::this_thread::sleep_for(Millis(20));  // the killed processes are still exiting
  }
}

JobMemoryCgroups::JobMemoryCgroups(const std::string& job_id) {
  const MemoryHierarchy h = memory_hierarchy();
  dir_ = make_job_cgroup(h, job_id);
  remove_abandoned_job_cgroups(parent_of(dir_));
}

JobMemoryCgroups::~JobMemoryCgroups() { remove_cgroup_tree(dir_); }

RankMemoryCgroup::RankMemoryCgroup(const std::string& job_id, int rank, std::uint64_t limit) {
  MemoryHierarchy h = memory_hierarchy();
  job_dir_ = make_job_cgroup(h, job_id);
  const std::string dir = job_dir_ + "/rank-" + std::to_string(rank);
  if (::mkdir(dir.c_str(), 0755) != 0 && errno != EEXIST) refuse("cannot create the memory cgroup " + dir, errno);
  const std::string value = std::to_string(limit);
  if (h.version == 1) {
    if (int err = write_text(dir + "/memory.limit_in_bytes", value)) refuse("cannot limit " + dir, err);
    // memsw counts memory and swap together: equal to the limit, no swap.
    if (exists(dir + "/memory.memsw.limit_in_bytes")) {
      if (int err = write_text(dir + "/memory.memsw.limit_in_bytes", value)) refuse("cannot limit swap of " + dir, err);
    } else {
      write_text(dir + "/memory.swappiness", "0");  // swap not accounted: keep the cgroup out of it
    }
  } else {
    if (int err = write_text(dir + "/memory.max", value)) refuse("cannot limit " + dir, err);
    if (exists(dir + "/memory.swap.max")) {
      if (int err = write_text(dir + "/memory.swap.max", "0")) refuse("cannot limit swap of " + dir, err);
    }
    write_text(dir + "/memory.oom.group", "1");  // best effort: older kernels lack it
  }
  watch_.hierarchy = h;
  watch_.dir = dir;
  watch_.limit = effective_limit(h, dir);  // the kernel rounds to pages; an ancestor may be lower
  watch_.oom_kills_at_start = oom_kills_of(h.version, dir);
  watch_.made_for_rank = true;
}

RankMemoryCgroup::~RankMemoryCgroup() {
  remove_cgroup_tree(watch_.dir);
  ::rmdir(job_dir_.c_str());  // the last rank on this host takes the folder; others still use it
}

}  // namespace hpct::launch
