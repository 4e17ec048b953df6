// Logging with the rank on every line.
//
// A Logger is a small value (level, subsystems, rank, sink) passed to whoever
// logs; there is no global logger, so ranks living as threads in one test
// process each print their own rank. Each line is written with one write(2),
// so lines from several processes sharing a terminal never interleave mid-line.
#pragma once

#include <functional>
#include <memory>
#include <sstream>
#include <string>

namespace hpct {

struct Config;

enum class LogLevel { kError = 0, kWarn = 1, kInfo = 2, kDebug = 3, kTrace = 4 };

// Parses error|warn|info|debug|trace; InvalidArgument otherwise.
LogLevel parse_log_level(const std::string& s);

class Logger {
 public:
  using Sink = std::function<void(const std::string& line)>;

  // Level info, all subsystems, no rank, lines to stderr.
  Logger();
  Logger(LogLevel level, std::string subsystems, int rank, Sink sink = nullptr);
  static Logger from_config(const Config& config, int rank);

  Logger with_rank(int rank) const;
  int rank() const { return rank_; }

  bool enabled(LogLevel level, const char* subsystem) const;
  // Thread-safe when the sink is (the default stderr sink is).
  void log(LogLevel level, const char* subsystem, const std::string& message) const;

  void error(const char* subsystem, const std::string& m) const { log(LogLevel::kError, subsystem, m); }
  void warn(const char* subsystem, const std::string& m) const { log(LogLevel::kWarn, subsystem, m); }
  void info(const char* subsystem, const std::string& m) const { log(LogLevel::kInfo, subsystem, m); }
  void debug(const char* subsystem, const std::string& m) const { log(LogLevel::kDebug, subsystem, m); }

 private:
  LogLevel level_ = LogLevel::kInfo;
  std::string subsystems_ = "all";
  int rank_ = -1;
  Sink sink_;
};

}  // namespace hpct
