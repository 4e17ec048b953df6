#include "doctor/capture.h"

#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include "core/error.h"
#include "launch/child_process.h"

namespace hpct::doctor {

Captured capture_command(const std::vector<std::string>& argv, Millis timeout) {
  Captured result;
  launch::ChildOptions o;
  o.argv = argv;
  o.pipe_stdin = false;
  launch::Child c;
  try {
    c = launch::start_child(o);
  } catch (const Error&) {
    return result;
  }
  std::string out;
  bool out_open = true, err_open = true, ended = false;
  int status = 0;
  Deadline deadline(timeout);
  while ((out_open || err_open || !ended) && !deadline.expired()) {
    pollfd fds[2] = {{out_open ? c.stdout_fd.get() : -1, POLLIN, 0},
                     {err_open ? c.stderr_fd.get() : -1, POLLIN, 0}};
    ::poll(fds, 2, 20);
    char buf[4096];
    for (int k = 0; k < 2; ++k) {
      bool& open = k == 0 ? out_open : err_open;
      if (!open) continue;
      ssize_t n = ::read(k == 0 ? c.stdout_fd.get() : c.stderr_fd.get(), buf, sizeof buf);
      if (n == 0) open = false;
      if (n > 0 && out.size() < 65536) out.append(buf, static_cast<size_t>(n));
    }
    if (!ended) ended = launch::reap(c.pid, &status);
  }
  if (!ended) {
    ::kill(-c.pid, SIGKILL);
    for (int i = 0; i < 1000 && !launch::reap(c.pid, &status); ++i) ::usleep(1000);
    result.out = out;
    return result;
  }
  result.finished = true;
  result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  result.out = out;
  return result;
}

}  // namespace hpct::doctor
