// Reading several ranks' /metrics at once, each read bounded in time: the
// HTTP side of `hpctrain top`. libcurl's multi interface runs every GET in
// parallel on the calling thread, so one rank that stopped answering costs
// the whole round at most `timeout`, not timeout per rank.
#pragma once

#include <chrono>
#include <string>
#include <vector>

namespace hpct::metrics {

struct ScrapeResult {
  std::string target;  // host:port as given
  bool ok = false;     // HTTP 200 within the bound
  std::string body;    // the exposition text when ok
  std::string
      error;  // why not, when !ok: "no answer within 1.0 s", "connection refused", "HTTP 404"
  bool timed_out = false;  // connected or connecting, but no whole answer within the bound
};

// GET http://TARGET/metrics for every target in parallel; returns when all
// have answered or failed, or after `timeout` (those still pending fail
// with timed_out). Blocks; thread-safe (its own handles).
std::vector<ScrapeResult> scrape_targets(const std::vector<std::string>& targets,
                                         std::chrono::milliseconds timeout);

}  // namespace hpct::metrics
