// Host discovery for elastic jobs (elastic_supervisor.h): the user's
// script run with a bound, and its output parsed into hosts.
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <sstream>
#include <tuple>

#include "core/error.h"
#include "launch/child_process.h"
#include "launch/elastic_supervisor.h"

namespace hpct::launch {

std::vector<HostEntry> parse_discovery_output(const std::string& text) {
  std::vector<HostEntry> out;
  std::istringstream in(text);
  std::string line;
  for (int n = 1; std::getline(in, line); ++n) {
    auto hash = line.find('#');
    if (hash != std::string::npos) line.resize(hash);
    auto b = line.find_first_not_of(" \t\r");
    if (b == std::string::npos) continue;
    line = line.substr(b, line.find_last_not_of(" \t\r") + 1 - b);
    HostEntry h;
    h.origin = "discovery line " + std::to_string(n);
    auto colon = line.rfind(':');
    h.name = line.substr(0, colon);
    if (colon != std::string::npos) {
      const std::string slots = line.substr(colon + 1);
      char* end = nullptr;
      long v = std::strtol(slots.c_str(), &end, 10);
      if (slots.empty() || *end != '\0' || v < 1 || v > 4096) {
        throw_invalid_argument("host discovery script, line " + std::to_string(n) + " '" + line +
                               "': expected host:slots with slots a positive number");
      }
      h.slots = static_cast<int>(v);
    }
    if (h.name.empty() || h.name.find_first_of(" \t,") != std::string::npos) {
      throw_invalid_argument("host discovery script, line " + std::to_string(n) + " '" + line +
                             "': expected host:slots");
    }
    out.push_back(h);
  }
  return out;
}

namespace {

// Runs the discovery script with a bound; its stdout, or Io/Timeout.
std::string run_discovery(const std::string& script, Millis timeout) {
  ChildOptions o;
  o.argv = {"/bin/sh", "-c", script};
  o.pipe_stdin = false;
  o.death_signal = SIGKILL;
  Child c = start_child(o);
  std::string out, err;
  const Deadline deadline(timeout);
  bool out_open = true, err_open = true;
  int status = 0;
  bool exited = false;
  while (out_open || err_open || !exited) {
    if (deadline.expired()) {
      ::kill(-c.pid, SIGKILL);
      ::waitpid(c.pid, &status, 0);
      throw_timeout("host discovery script '" + script + "' did not finish within " +
                    std::to_string(timeout.count()) + " ms");
    }
    pollfd fds[2];
    int n = 0;
    if (out_open) fds[n++] = {c.stdout_fd.get(), POLLIN, 0};
    if (err_open) fds[n++] = {c.stderr_fd.get(), POLLIN, 0};
    if (n > 0)
      ::poll(fds, static_cast<nfds_t>(n), 20);
    else
      ::usleep(5000);
    char buf[4096];
    for (auto [fd, open, sink] :
         {std::tuple<int, bool*, std::string*>{c.stdout_fd.get(), &out_open, &out},
          std::tuple<int, bool*, std::string*>{c.stderr_fd.get(), &err_open, &err}}) {
      while (*open) {
        ssize_t r = ::read(fd, buf, sizeof buf);
        if (r > 0) {
          sink->append(buf, static_cast<size_t>(r));
          if (sink->size() > (1u << 20))
            throw_invalid_argument("host discovery script printed more than 1 MiB");
          continue;
        }
        if (r == 0) *open = false;
        break;
      }
    }
    if (!exited) exited = reap(c.pid, &status);
  }
  ::kill(-c.pid, SIGKILL);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    std::string first = err.substr(0, err.find('\n'));
    throw Error(ErrorCode::kIo, "host discovery script '" + script + "' " +
                                    describe_status(status) + (first.empty() ? "" : ": " + first));
  }
  return out;
}

}  // namespace

std::vector<HostEntry> discover_hosts(const std::string& script, Millis timeout) {
  return parse_discovery_output(run_discovery(script, timeout));
}

}  // namespace hpct::launch
