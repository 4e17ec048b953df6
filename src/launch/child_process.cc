#include "launch/child_process.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "core/error.h"
#include "core/env.h"

extern char** environ;

namespace hpct::launch {
namespace {

void make_pipe(int fds[2]) {
  if (::pipe2(fds, O_CLOEXEC) != 0) throw_io("pipe", errno);
}

void set_nonblocking(int fd) {
  int flags = ::fcntl(fd, F_GETFL);
  ::fcntl(fd, F_SETFL, flags | O_NONBLOCK);
}

// This process's environment with o.env added or overriding and
// o.unset_env removed, as NAME=VALUE strings.
std::vector<std::string> child_environment(const ChildOptions& o) {
  std::vector<std::string> env_strings;
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
    std::string kv(*e);
    std::string name = kv.substr(0, kv.find('='));
    if (o.env.count(name) != 0) continue;
    bool drop = false;
    for (const auto& u : o.unset_env) drop = drop || u == name;
    if (!drop) env_strings.push_back(kv);
  }
  for (const auto& [k, v] : o.env) env_strings.push_back(k + "=" + v);
  return env_strings;
}

// The paths to try for argv[0]: execvpe looks argv[0] up in the PATH of
// *this* process; the child's PATH may differ (carried over from another
// host), so resolve it ourselves.
std::vector<std::string> exec_candidates(const ChildOptions& o) {
  std::string path_var;
  auto it = o.env.find("PATH");
  if (it != o.env.end()) path_var = it->second;
  else path_var = ProcessEnv().get("PATH").value_or("/usr/local/bin:/usr/bin:/bin");
  std::vector<std::string> candidates;
  if (o.argv[0].find('/') != std::string::npos) {
    candidates.push_back(o.argv[0]);
  } else {
    size_t pos = 0;
    while (pos <= path_var.size()) {
      size_t colon = path_var.find(':', pos);
      if (colon == std::string::npos) colon = path_var.size();
      std::string dir = path_var.substr(pos, colon - pos);
      candidates.push_back((dir.empty() ? "." : dir) + "/" + o.argv[0]);
      pos = colon + 1;
    }
  }
  return candidates;
}

[[noreturn]] void report_and_exit(int status_fd, char tag, int e) {
  (void)!::write(status_fd, &tag, 1);
  (void)!::write(status_fd, &e, sizeof e);
  ::_exit(127);
}

// Writes this process's pid to an open cgroup.procs (async-signal-safe).
bool enter_cgroup(int procs_fd) {
  char digits[24];
  int n = 0;
  for (long v = ::getpid(); v > 0 && n < 23; v /= 10) digits[n++] = static_cast<char>('0' + v % 10);
  char text[24];
  for (int i = 0; i < n; ++i) text[i] = digits[n - 1 - i];
  return ::write(procs_fd, text, static_cast<size_t>(n)) == n;
}

// The child's side of start_child, after fork: only async-signal-safe
// calls. Reports a failure to enter the cgroup ('c'), cwd ('d') or to exec
// ('x') with its errno on the status pipe.
[[noreturn]] void run_child(const ChildOptions& o, pid_t parent, const int in[2], const int out[2],
                            const int err[2], const int status[2], int procs_fd, std::vector<char*>& args,
                            std::vector<char*>& envp, const std::vector<std::string>& candidates) {
  ::setpgid(0, 0);
  if (procs_fd >= 0 && !enter_cgroup(procs_fd)) report_and_exit(status[1], 'c', errno);
  if (o.death_signal != 0) {
    ::prctl(PR_SET_PDEATHSIG, o.death_signal);
    if (::getppid() != parent) ::_exit(127);  // the parent died before prctl
  }
  for (int s = 1; s < NSIG; ++s) {
    if (s != SIGKILL && s != SIGSTOP) ::signal(s, SIG_DFL);
  }
  sigset_t none;
  sigemptyset(&none);
  ::sigprocmask(SIG_SETMASK, &none, nullptr);
  int null_fd = o.pipe_stdin ? -1 : ::open("/dev/null", O_RDONLY);
  ::dup2(o.pipe_stdin ? in[0] : null_fd, 0);
  ::dup2(out[1], 1);
  ::dup2(err[1], 2);
  if (o.inherit_fd >= 0) ::fcntl(o.inherit_fd, F_SETFD, 0);
  if (!o.cwd.empty() && ::chdir(o.cwd.c_str()) != 0) report_and_exit(status[1], 'd', errno);
  int e = ENOENT;
  for (const auto& c : candidates) {
    ::execve(c.c_str(), args.data(), envp.data());
    if (errno != ENOENT || e == ENOENT) e = errno;
  }
  report_and_exit(status[1], 'x', e);
}

}  // namespace

Child start_child(const ChildOptions& o) {
  if (o.argv.empty()) throw_invalid_argument("start_child: empty command");
  // Everything the child needs is built before fork: after it, only
  // async-signal-safe calls.
  std::vector<char*> args;
  for (const auto& a : o.argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  std::vector<std::string> env_strings = child_environment(o);
  std::vector<char*> envp;
  for (auto& s : env_strings) envp.push_back(s.data());
  envp.push_back(nullptr);
  const std::vector<std::string> candidates = exec_candidates(o);

  UniqueFd procs;
  if (!o.cgroup_procs.empty()) {
    procs.reset(::open(o.cgroup_procs.c_str(), O_WRONLY | O_CLOEXEC));
    if (!procs.valid()) throw_io("cannot open " + o.cgroup_procs + " to start '" + o.argv[0] + "' in its cgroup", errno);
  }

  int in[2] = {-1, -1}, out[2], err[2], status[2];
  if (o.pipe_stdin) make_pipe(in);
  make_pipe(out);
  make_pipe(err);
  make_pipe(status);
  const pid_t parent = ::getpid();

  pid_t pid = ::fork();
  if (pid < 0) throw_io("fork for " + o.argv[0], errno);
  if (pid == 0) run_child(o, parent, in, out, err, status, procs.get(), args, envp, candidates);
  ::setpgid(pid, pid);  // also here, so the group exists before anyone signals it
  if (o.pipe_stdin) ::close(in[0]);
  ::close(out[1]);
  ::close(err[1]);
  ::close(status[1]);
  char buf[1 + sizeof(int)];
  size_t got = 0;
  while (got < sizeof buf) {
    ssize_t n = ::read(status[0], buf + got, sizeof buf - got);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    got += static_cast<size_t>(n);
  }
  ::close(status[0]);
  if (got == sizeof buf) {
    int e;
    std::memcpy(&e, buf + 1, sizeof e);
    int st;
    ::waitpid(pid, &st, 0);
    if (o.pipe_stdin) ::close(in[1]);
    ::close(out[0]);
    ::close(err[0]);
    if (buf[0] == 'd') throw_io("cannot enter working directory " + o.cwd, e);
    if (buf[0] == 'c') throw_io("cannot move '" + o.argv[0] + "' into the cgroup of " + o.cgroup_procs, e);
    throw_io("cannot run '" + o.argv[0] + "'", e);
  }
  Child c;
  c.pid = pid;
  if (o.pipe_stdin) c.stdin_fd.reset(in[1]);
  c.stdout_fd.reset(out[0]);
  c.stderr_fd.reset(err[0]);
  set_nonblocking(out[0]);
  set_nonblocking(err[0]);
  if (o.pipe_stdin) set_nonblocking(in[1]);
  return c;
}

std::string describe_status(int status) {
  if (WIFSIGNALED(status)) return "was killed by signal " + std::to_string(WTERMSIG(status));
  return "exited with code " + std::to_string(WEXITSTATUS(status));
}

bool reap(pid_t pid, int* status) {
  pid_t r;
  do {
    r = ::waitpid(pid, status, WNOHANG);
  } while (r < 0 && errno == EINTR);
  if (r == pid) return true;
  if (r < 0) {  // not our child (already reaped): treat as ended
    *status = 0;
    return true;
  }
  return false;
}

void WatchedChild::drain(bool is_err, const std::function<void(const std::string&)>& on_line) {
  int fd = is_err ? child.stderr_fd.get() : child.stdout_fd.get();
  bool& open = is_err ? err_open : out_open;
  LineSplitter& split = is_err ? err_lines : out_lines;
  char buf[65536];
  for (int i = 0; i < 16 && open; ++i) {
    ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return;
    if (n == 0) {
      open = false;
      split.flush(on_line);
      return;
    }
    split.feed(buf, static_cast<size_t>(n), on_line);
  }
}

}  // namespace hpct::launch
