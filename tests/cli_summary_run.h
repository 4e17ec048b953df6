// Runs hpctrain (HPCT_BINARY, defined by each test target) from the train
// tests with one intra-op thread per rank: exit code, output, and the last
// JSON line of the output (rank 0's summary, or a benchmark's result).
#pragma once

#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "shell_run.h"

namespace hpct::test {

struct CliRun {
  int exit_code = -1;
  std::string out;         // stdout and stderr together
  nlohmann::json summary;  // the last JSON line of the output (discarded when it does not parse)
};

// `cmd` run by the shell, stderr joined to stdout.
inline CliRun run_with_summary(const std::string& cmd) {
  ShellResult s = run_shell(cmd + " 2>&1");
  CliRun r;
  r.exit_code = s.exit_code;
  r.out = std::move(s.out);
  const size_t pos = r.out.rfind("{\"");
  if (pos != std::string::npos) {
    r.summary = nlohmann::json::parse(r.out.substr(pos, r.out.find('\n', pos) - pos), nullptr, false);
  }
  return r;
}

// `hpctrain ARGS`, bounded to 300 s.
inline CliRun run_hpctrain(const std::string& args) {
  return run_with_summary(std::string("timeout 300 env OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 ") +
                          HPCT_BINARY + " " + args);
}

// Every line of `out` that starts with '{', parsed: benchmark lines, rank 0's
// summary. A line that does not parse is left out, or, when strict, throws
// (nlohmann::json::parse_error), which fails the test that asked.
inline std::vector<nlohmann::json> json_lines(const std::string& out, bool strict = false) {
  std::vector<nlohmann::json> v;
  std::istringstream in(out);
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] != '{') continue;
    auto j = strict ? nlohmann::json::parse(line) : nlohmann::json::parse(line, nullptr, false);
    if (!j.is_discarded()) v.push_back(std::move(j));
  }
  return v;
}

}  // namespace hpct::test
