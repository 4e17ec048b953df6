// Small statistics over measured times, shared by the benchmarks and the
// cost model's calibration.
#pragma once

#include <algorithm>
#include <vector>

namespace hpct {

// The median: the middle value, or the mean of the two middle ones; 0 for
// no values.
inline double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

}  // namespace hpct
