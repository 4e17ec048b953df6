// This process's CPU time and resident memory, from /proc/self (Linux).
#pragma once

#include <cstdint>

namespace hpct::metrics {

struct ProcessStats {
  double cpu_seconds = 0;            // user + system, all threads
  std::uint64_t resident_bytes = 0;  // resident set size
};

// Reads /proc/self/stat and /proc/self/statm; zeros when they cannot be read.
ProcessStats read_process_stats();

}  // namespace hpct::metrics
