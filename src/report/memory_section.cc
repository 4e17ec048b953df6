#include "report/memory_section.h"

#include <cmath>
#include <cstdio>

namespace hpct::report {
namespace {

const char* const kKeys[] = {"parameter_bytes", "gradient_bytes", "optimizer_state_bytes",
                             "peak_rss_bytes"};

bool carries_memory(const nlohmann::json& per_rank) {
  if (!per_rank.is_array() || per_rank.empty()) return false;
  for (const auto& r : per_rank) {
    if (!r.is_object()) return false;
    for (const char* k : kKeys) {
      if (r.contains(k)) return true;
    }
  }
  return false;
}

// The per-rank array the section shows and what it came from; null when none.
const nlohmann::json* memory_rows(const RunInputs& in, std::string* source) {
  for (auto it = in.summaries.rbegin(); it != in.summaries.rend(); ++it) {
    const auto m = it->find("memory");
    if (m != it->end() && carries_memory(*m)) {
      *source = "the run's summary line";
      return &*m;
    }
  }
  for (auto it = in.steps.rbegin(); it != in.steps.rend(); ++it) {
    const auto r = it->find("ranks");
    if (r != it->end() && carries_memory(*r)) {
      *source = "the last step line that has them (step " + it->value("step", nlohmann::json()).dump() + ")";
      return &*r;
    }
  }
  return nullptr;
}

std::string megabytes(const nlohmann::json& r, const char* key) {
  const auto it = r.find(key);
  if (it == r.end() || !it->is_number()) return "&ndash;";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f", it->get<double>() / 1e6);
  return buf;
}

}  // namespace

bool has_memory(const RunInputs& in) {
  std::string source;
  return memory_rows(in, &source) != nullptr;
}

std::string memory_section(const RunInputs& in) {
  std::string source;
  const nlohmann::json* rows = memory_rows(in, &source);
  if (rows == nullptr) return "<p class='note'>No memory figures in the metrics lines.</p>\n";
  std::string body =
      "<table>\n<tr><th>rank</th><th>parameters (MB)</th><th>gradients (MB)</th>"
      "<th>optimizer state (MB)</th><th>peak resident (MB)</th></tr>\n";
  for (size_t r = 0; r < rows->size(); ++r) {
    const auto& j = (*rows)[r];
    body += "<tr><td class='text'>rank " + std::to_string(r) + "</td>";
    for (const char* k : kKeys) body += "<td>" + megabytes(j, k) + "</td>";
    body += "</tr>\n";
  }
  body += "</table>\n<p class='note'>From " + source +
          ". Parameters, gradients and optimizer state are what each rank holds (its part when "
          "they are sharded); peak resident is the process's high-water mark (VmHWM), data and "
          "activations included. 1 MB = 10<sup>6</sup> bytes.</p>\n";
  return body;
}

}  // namespace hpct::report
