#include "core/subprocess.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstring>
#include <thread>

#include "core/error.h"

extern char** environ;

namespace hpct {
namespace {

// Waits for pid until `until`; true when it was reaped.
bool wait_until(pid_t pid, SteadyClock::time_point until, int* status) {
  Millis nap(1);
  while (true) {
    pid_t r = ::waitpid(pid, status, WNOHANG);
    if (r == pid) return true;
    if (r < 0 && errno != EINTR) return true;  // nothing left to wait for
    if (SteadyClock::now() >= until) return false;
    std::this_thread::sleep_for(nap);
    if (nap < Millis(50)) nap *= 2;
  }
}

}  // namespace

std::string join_command(const std::vector<std::string>& argv) {
  std::string s;
  for (const auto& a : argv) {
    if (!s.empty()) s += ' ';
    s += a.find_first_of(" \t'\"") == std::string::npos ? a : "'" + a + "'";
  }
  return s;
}

std::string self_executable() {
  char buf[PATH_MAX];
  ssize_t n = ::readlink("/proc/self/exe", buf, sizeof buf - 1);
  if (n <= 0) throw_io("readlink /proc/self/exe", errno);
  return std::string(buf, static_cast<size_t>(n));
}

SubprocessResult run_subprocess(const std::vector<std::string>& argv,
                                const std::map<std::string, std::string>& extra_env,
                                Millis timeout, Millis grace) {
  if (argv.empty()) throw_invalid_argument("run_subprocess: empty command");
  // Build argv and envp before fork: the child may only call async-signal-safe functions.
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  std::vector<std::string> env_strings;
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
    std::string kv(*e);
    std::string name = kv.substr(0, kv.find('='));
    if (extra_env.count(name) == 0) env_strings.push_back(kv);
  }
  for (const auto& [k, v] : extra_env) env_strings.push_back(k + "=" + v);
  std::vector<char*> envp;
  for (auto& s : env_strings) envp.push_back(s.data());
  envp.push_back(nullptr);

  // A pipe that closes on exec tells the parent whether exec worked.
  int status_pipe[2];
  if (::pipe2(status_pipe, O_CLOEXEC) != 0) throw_io("pipe", errno);
  pid_t pid = ::fork();
  if (pid < 0) throw_io("fork for " + argv[0], errno);
  if (pid == 0) {
    ::setpgid(0, 0);
    ::close(status_pipe[0]);
    ::execvpe(args[0], args.data(), envp.data());
    int err = errno;
    (void)!::write(status_pipe[1], &err, sizeof err);
    ::_exit(127);
  }
  ::setpgid(pid, pid);
  ::close(status_pipe[1]);
  int exec_errno = 0;
  ssize_t got;
  do {
    got = ::read(status_pipe[0], &exec_errno, sizeof exec_errno);
  } while (got < 0 && errno == EINTR);
  ::close(status_pipe[0]);
  if (got == sizeof exec_errno) {
    int st;
    ::waitpid(pid, &st, 0);
    throw_io("cannot run '" + argv[0] + "'", exec_errno);
  }

  SubprocessResult result;
  int status = 0;
  if (!wait_until(pid, SteadyClock::now() + timeout, &status)) {
    result.timed_out = true;
    ::kill(-pid, SIGTERM);
    if (!wait_until(pid, SteadyClock::now() + grace, &status)) {
      ::kill(-pid, SIGKILL);
      ::waitpid(pid, &status, 0);
    }
  }
  // Whatever the child left in its group goes with it.
  ::kill(-pid, SIGKILL);
  if (WIFSIGNALED(status)) {
    result.signal = WTERMSIG(status);
  } else if (WIFEXITED(status)) {
    result.exit_code = WEXITSTATUS(status);
  }
  return result;
}

}  // namespace hpct
