// This process's CPU time and resident memory, from /proc/self (Linux).
#pragma once

#include <cstdint>

namespace hpct::metrics {

struct ProcessStats {
  double cpu_seconds = 0;            // user + system, all threads
  std::uint64_t resident_bytes = 0;  // resident set size
  std::uint64_t peak_resident_bytes = 0;  // its high-water mark since the process began (VmHWM)
};

// Reads /proc/self/stat, /proc/self/statm and /proc/self/status; zeros when
// they cannot be read.
ProcessStats read_process_stats();

// VmHWM of /proc/self/status (the peak resident set size), or 0 when it
// cannot be read.
std::uint64_t read_peak_resident_bytes();

}  // namespace hpct::metrics
