// Reading Prometheus's text exposition format (version 0.0.4), the body a
// rank's /metrics returns: what `hpctrain top` parses after each scrape.
// Only the samples are kept (HELP and TYPE lines are comments here);
// label values are unescaped (\\, \" and \n).
#pragma once

#include <map>
#include <string>
#include <vector>

namespace hpct::metrics {

struct Sample {
  std::string name;                           // e.g. hpctrain_step_phase_seconds_sum
  std::map<std::string, std::string> labels;  // e.g. {phase: data, rank: 1, ...}
  double value = 0;                           // +Inf, -Inf and NaN as Prometheus writes them
};

// Every sample of `text`, in order. DataCorrupt naming the line number and
// what is wrong with it when a line is not in the format.
std::vector<Sample> parse_exposition(const std::string& text);

// The samples of one scrape, looked up by name and labels.
class Exposition {
 public:
  Exposition() = default;
  explicit Exposition(std::vector<Sample> samples) : samples_(std::move(samples)) {}

  // The first sample called `name` whose labels include every pair of
  // `match`, or null.
  const Sample* find(const std::string& name,
                     const std::map<std::string, std::string>& match = {}) const;
  // Its value, or `fallback` when there is none.
  double value(const std::string& name, const std::map<std::string, std::string>& match = {},
               double fallback = 0) const;
  // Every sample called `name`.
  std::vector<const Sample*> all(const std::string& name) const;
  bool empty() const { return samples_.empty(); }

 private:
  std::vector<Sample> samples_;
};

}  // namespace hpct::metrics
