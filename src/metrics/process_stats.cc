#include "metrics/process_stats.h"

#include <unistd.h>

#include <fstream>
#include <sstream>
#include <string>

namespace hpct::metrics {

ProcessStats read_process_stats() {
  ProcessStats s;
  std::ifstream stat("/proc/self/stat");
  std::string line;
  if (std::getline(stat, line)) {
    // Fields after the command name (which may hold spaces): state is field
    // 3, utime and stime fields 14 and 15, in clock ticks.
    auto close = line.rfind(')');
    if (close != std::string::npos) {
      std::istringstream rest(line.substr(close + 2));
      std::string field;
      unsigned long long utime = 0, stime = 0;
      for (int i = 3; i <= 15 && rest >> field; ++i) {
        if (i == 14) utime = std::stoull(field);
        if (i == 15) stime = std::stoull(field);
      }
      s.cpu_seconds = static_cast<double>(utime + stime) / static_cast<double>(sysconf(_SC_CLK_TCK));
    }
  }
  std::ifstream statm("/proc/self/statm");
  unsigned long long size = 0, resident = 0;
  if (statm >> size >> resident) {
    s.resident_bytes = resident * static_cast<std::uint64_t>(sysconf(_SC_PAGESIZE));
  }
  s.peak_resident_bytes = read_peak_resident_bytes();
  return s;
}

std::uint64_t read_peak_resident_bytes() {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("VmHWM:", 0) == 0) {
      std::istringstream rest(line.substr(6));
      unsigned long long kib = 0;
      if (rest >> kib) return kib * 1024;  // "VmHWM:   123456 kB"
      return 0;
    }
  }
  return 0;
}

}  // namespace hpct::metrics
