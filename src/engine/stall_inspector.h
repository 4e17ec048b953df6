// The stall inspector: the coordinator's watch over tensors that some ranks
// have submitted and others have not.
//
// After HPCT_STALL_WARN_S it logs a warning naming the tensor, the ranks that
// submitted it and the ranks that did not (again every HPCT_STALL_WARN_S while
// it lasts). After HPCT_STALL_ABORT_S (HPCT_TIMEOUT_S unless set; 0: never)
// it tells the coordinator to fail the tensor on every rank with a Timeout
// error carrying the same names.
// A stall is usually a program bug: ranks taking different branches, or one
// rank skipping a step.
//
// Not thread-safe: used by the coordinator (rank 0's background thread).
#pragma once

#include <atomic>
#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/clock.h"
#include "core/log.h"

namespace hpct::engine {

struct StallCandidate {
  std::string name;
  std::string what;         // "allreduce float32 [10]"
  std::vector<int> have;    // ranks that submitted it
  SteadyClock::time_point since;  // when the first rank submitted it
};

class StallInspector {
 public:
  StallInspector(double warn_s, double abort_s, int size, Logger logger)
      : warn_s_(warn_s), abort_s_(abort_s), size_(size), logger_(std::move(logger)) {}

  // Checks every tensor still waiting for some rank; returns (name, message)
  // for each one to fail now. Forgets tensors that are no longer waiting.
  std::vector<std::pair<std::string, std::string>> check(const std::vector<StallCandidate>& waiting,
                                                         SteadyClock::time_point now);

  // "tensor 'x' (allreduce ...) submitted by ranks [0] but not by ranks [1] for 2.0 s"
  std::string describe(const StallCandidate& c, SteadyClock::time_point now) const;

  // Warnings logged so far (any thread may read it).
  std::uint64_t warnings() const { return warnings_.load(std::memory_order_relaxed); }

 private:
  void warn(const std::string& line);
  std::atomic<std::uint64_t> warnings_{0};
  double warn_s_;
  double abort_s_;
  int size_;
  Logger logger_;
  std::unordered_map<std::string, SteadyClock::time_point> last_warned_;
};

}  // namespace hpct::engine
