#include "doctor/probe_session.h"

#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <thread>

#include "core/error.h"
#include "net/socket.h"

namespace hpct::doctor {

ProbeSession::ProbeSession(const std::vector<std::string>& argv) : start_(SteadyClock::now()) {
  launch::ChildOptions o;
  o.argv = argv;
  o.pipe_stdin = true;
  try {
    child_ = launch::start_child(o);
    stdout_open_ = stderr_open_ = true;
  } catch (const Error& e) {
    ended_ = true;
    exit_code_ = 127;
    err_ = e.what();
  }
}

ProbeSession::~ProbeSession() { kill(); }

double ProbeSession::age_s() const {
  return std::chrono::duration<double>(SteadyClock::now() - start_).count();
}

bool ProbeSession::send(const std::string& line) {
  if (!child_.stdin_fd.valid()) return false;
  const std::string data = line + "\n";
  try {
    net::write_all(child_.stdin_fd.get(), data.data(), data.size(),
                   SteadyClock::now() + Millis(1000), -1, "the probe's input");
    return true;
  } catch (const Error& e) {
    if (e.code() == ErrorCode::kPeerFailure) child_.stdin_fd.reset();  // the child is gone
    return false;
  }
}

void ProbeSession::close_input() { child_.stdin_fd.reset(); }

std::optional<std::string> ProbeSession::next_line() {
  if (lines_.empty()) return std::nullopt;
  std::string l = std::move(lines_.front());
  lines_.pop_front();
  return l;
}

void ProbeSession::read_available() {
  char buf[65536];
  while (stdout_open_) {
    ssize_t n = ::read(child_.stdout_fd.get(), buf, sizeof buf);
    if (n > 0) {
      out_buf_.append(buf, static_cast<size_t>(n));
      size_t nl;
      while ((nl = out_buf_.find('\n')) != std::string::npos) {
        lines_.push_back(out_buf_.substr(0, nl));
        out_buf_.erase(0, nl + 1);
      }
      if (out_buf_.size() > (1 << 20)) out_buf_.clear();  // no line is that long
    } else if (n == 0 || (errno != EAGAIN && errno != EINTR)) {
      stdout_open_ = false;
    } else {
      break;
    }
  }
  while (stderr_open_) {
    ssize_t n = ::read(child_.stderr_fd.get(), buf, sizeof buf);
    if (n > 0) {
      if (err_.size() < 8192) err_.append(buf, static_cast<size_t>(n));
    } else if (n == 0 || (errno != EAGAIN && errno != EINTR)) {
      stderr_open_ = false;
    } else {
      break;
    }
  }
  // Ended only once its output is drained, so no last line is lost.
  if (!ended_ && !stdout_open_ && !stderr_open_) {
    int status = 0;
    if (launch::reap(child_.pid, &status)) {
      ended_ = true;
      exit_code_ = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    }
  }
}

void ProbeSession::kill() {
  if (ended_ || child_.pid <= 0) return;
  ::kill(-child_.pid, SIGKILL);
  int status = 0;
  for (int i = 0; i < 1000; ++i) {
    if (launch::reap(child_.pid, &status)) break;
    std::this_thread::sleep_for(Millis(1));
  }
  ended_ = true;
  if (exit_code_ < 0) exit_code_ = 128 + SIGKILL;
}

void pump_sessions(std::vector<ProbeSession*>& sessions, Millis wait) {
  std::vector<pollfd> fds;
  bool waiting_exit = false;
  for (auto* s : sessions) {
    if (s->ended_) continue;
    if (s->stdout_open_) fds.push_back({s->child_.stdout_fd.get(), POLLIN, 0});
    if (s->stderr_open_) fds.push_back({s->child_.stderr_fd.get(), POLLIN, 0});
    if (!s->stdout_open_ && !s->stderr_open_) waiting_exit = true;
  }
  // A child whose pipes closed is reaped by polling, so wait briefly then.
  int ms = static_cast<int>(waiting_exit ? std::min<long long>(wait.count(), 10) : wait.count());
  if (!fds.empty() || ms > 0) ::poll(fds.data(), fds.size(), ms);
  for (auto* s : sessions) {
    if (!s->ended_) s->read_available();
  }
}

bool pump_until(std::vector<ProbeSession*>& sessions, const Deadline& deadline,
                const std::function<bool()>& done) {
  while (!done()) {
    if (deadline.expired()) return false;
    pump_sessions(sessions, std::min(deadline.remaining(), Millis(50)));
  }
  return true;
}

}  // namespace hpct::doctor
