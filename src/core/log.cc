#include "core/log.h"

#include <unistd.h>

#include <chrono>
#include <ctime>

#include "core/config.h"
#include "core/error.h"

namespace hpct {
namespace {

const char* level_letter(LogLevel l) {
  switch (l) {
    case LogLevel::kError: return "E";
    case LogLevel::kWarn: return "W";
    case LogLevel::kInfo: return "I";
    case LogLevel::kDebug: return "D";
    case LogLevel::kTrace: return "T";
  }
  return "?";
}

// Not net::write_all: core sits below net, and a log line must never throw
// or wait on a deadline, so this one short loop stays here.
void write_stderr(const std::string& line) {
  const char* p = line.data();
  size_t left = line.size();
  while (left > 0) {
    ssize_t n = ::write(2, p, left);
    if (n <= 0) return;  // nowhere left to report a logging failure
    p += n;
    left -= static_cast<size_t>(n);
  }
}

}  // namespace

LogLevel parse_log_level(const std::string& s) {
  if (s == "error") return LogLevel::kError;
  if (s == "warn" || s == "warning") return LogLevel::kWarn;
  if (s == "info") return LogLevel::kInfo;
  if (s == "debug") return LogLevel::kDebug;
  if (s == "trace") return LogLevel::kTrace;
  throw_invalid_argument("log level '" + s + "' is not one of error, warn, info, debug, trace");
}

Logger::Logger() : sink_(write_stderr) {}

Logger::Logger(LogLevel level, std::string subsystems, int rank, Sink sink)
    : level_(level), subsystems_(std::move(subsystems)), rank_(rank),
      sink_(sink ? std::move(sink) : Sink(write_stderr)) {}

Logger Logger::from_config(const Config& config, int rank) {
  return Logger(parse_log_level(config.log_level), config.log_subsystems, rank);
}

Logger Logger::with_rank(int rank) const {
  Logger l = *this;
  l.rank_ = rank;
  return l;
}

bool Logger::enabled(LogLevel level, const char* subsystem) const {
  if (level > level_) return false;
  if (level <= LogLevel::kWarn || subsystems_ == "all") return true;
  const std::string s(subsystem);
  size_t pos = 0;
  while (pos <= subsystems_.size()) {
    size_t comma = subsystems_.find(',', pos);
    if (comma == std::string::npos) comma = subsystems_.size();
    if (subsystems_.compare(pos, comma - pos, s) == 0 && comma - pos == s.size()) return true;
    pos = comma + 1;
  }
  return false;
}

void Logger::log(LogLevel level, const char* subsystem, const std::string& message) const {
  if (!enabled(level, subsystem)) return;
  using namespace std::chrono;
  auto now = system_clock::now();
  std::time_t t = system_clock::to_time_t(now);
  int ms = static_cast<int>(duration_cast<milliseconds>(now.time_since_epoch()).count() % 1000);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char stamp[32];
  std::snprintf(stamp, sizeof stamp, "%02d:%02d:%02d.%03d", tm.tm_hour, tm.tm_min, tm.tm_sec, ms);
  std::string line = "[hpctrain";
  if (rank_ >= 0) line += " rank " + std::to_string(rank_);
  line += std::string(" ") + stamp + " " + level_letter(level) + " " + subsystem + "] " + message;
  line += '\n';
  sink_(line);
}

}  // namespace hpct
