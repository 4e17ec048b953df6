// The head's end of one probe (probe.h): a child process (ssh, or the probe
// itself on this host) with a line-oriented stdin and stdout. Sessions are
// driven together by pump_sessions() from one thread, so N hosts cost one
// poll loop and a dead one costs only the bound it is waited for.
// Not thread-safe: one thread owns all sessions. The child and everything
// it starts are killed (its process group) when the session is destroyed.
#pragma once

#include <deque>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "core/clock.h"
#include "launch/child_process.h"

namespace hpct::doctor {

class ProbeSession {
 public:
  // Starts argv. Never throws: a program that cannot start gives a session
  // that has already ended with exit code 127 and the reason in stderr.
  explicit ProbeSession(const std::vector<std::string>& argv);
  ~ProbeSession();
  ProbeSession(const ProbeSession&) = delete;
  ProbeSession& operator=(const ProbeSession&) = delete;

  // Writes one line to the child's stdin (bounded: 1 s). False when it is gone.
  bool send(const std::string& line);
  void close_input();

  // The next complete stdout line, if one has arrived.
  std::optional<std::string> next_line();
  bool ended() const { return ended_; }
  int exit_code() const { return exit_code_; }  // -1 until ended; 128+N for signal N
  const std::string& stderr_text() const { return err_; }
  double age_s() const;  // since start

  // Kills the process group and reaps the child (bounded: 1 s).
  void kill();

 private:
  friend void pump_sessions(std::vector<ProbeSession*>&, Millis);
  void read_available();

  launch::Child child_;
  bool ended_ = false;
  bool stdout_open_ = false;
  bool stderr_open_ = false;
  int exit_code_ = -1;
  std::string out_buf_;
  std::string err_;
  std::deque<std::string> lines_;
  SteadyClock::time_point start_;
};

// Waits up to `wait` for output from any session and reads what arrived.
void pump_sessions(std::vector<ProbeSession*>& sessions, Millis wait);

// Pumps until done() or the deadline; done() is checked after every pump.
// Returns done()'s last value.
bool pump_until(std::vector<ProbeSession*>& sessions, const Deadline& deadline,
                const std::function<bool()>& done);

}  // namespace hpct::doctor
