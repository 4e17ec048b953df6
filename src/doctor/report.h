// What `hpctrain doctor` found: one Row per (host, check) or per (host pair,
// check), each with a verdict, what was seen and, when not ok, how to fix it.
// Plain values: the checks produce them, the renderers print them.
#pragma once

#include <string>
#include <vector>

namespace hpct::doctor {

enum class Status { kOk, kWarn, kFail, kSkip };

// "ok", "warn", "fail", "skip" (JSON and messages).
const char* status_name(Status s);
// The worse of two verdicts; skip is better than ok so it never hides one.
Status worst(Status a, Status b);

struct Row {
  std::vector<std::string> hosts;  // one host, or two (from, to) for pairwise checks
  std::string check;               // "ssh", "ports", ...
  Status status = Status::kOk;
  std::string detail;              // what was seen, one line
  std::string fix;                 // the command or edit that fixes it; empty when ok
};

// A square matrix of measurements between hosts (full mode), row = from.
struct Matrix {
  std::string name;  // "latency_us", "bandwidth_gbps"
  std::string unit;  // "us", "Gbit/s"
  std::vector<std::vector<double>> values;  // negative: not measured
};

struct Report {
  std::vector<std::string> hosts;    // as listed, in order
  std::vector<std::string> columns;  // per-host checks, in table order
  std::vector<Row> rows;
  std::vector<std::string> facts;    // one summary line per host ("h1: Open MPI 4.1.4, ...")
  std::vector<Matrix> matrices;
  std::string ports;                 // the port range checked, for the pair table's title
  bool quick = false;
  double elapsed_s = 0;

  // No row failed (warnings still leave the cluster ready).
  bool ready() const;
  // 0 when ready, 1 otherwise: the CLI's exit status.
  int exit_code() const { return ready() ? 0 : 1; }
};

}  // namespace hpct::doctor
