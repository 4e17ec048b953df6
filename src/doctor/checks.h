// The checks: each a pure function from what the head learnt (facts.h) to
// rows of verdicts (report.h), so every verdict, fix line and mismatch
// message is unit-tested on invented clusters. Thread-safe.
//
// A host whose probe never answered gets the ssh (or hpctrain) failure that
// explains why, and "skip" in the checks that needed its facts.
#pragma once

#include <string>
#include <vector>

#include "doctor/facts.h"
#include "doctor/report.h"

namespace hpct::doctor {

// The per-host columns, in table order.
const std::vector<std::string>& host_check_names();

std::vector<Row> check_name(const DoctorInput& in);        // resolution, the 127.0.1.1 trap
std::vector<Row> check_ssh(const DoctorInput& in);         // BatchMode login
std::vector<Row> check_known_host(const DoctorInput& in);  // the head checks its host key
std::vector<Row> check_user(const DoctorInput& in);        // same user name as here
std::vector<Row> check_ids(const DoctorInput& in);         // same uid and gid as here
std::vector<Row> check_hpctrain(const DoctorInput& in);    // same version, build and path
std::vector<Row> check_packages(const DoctorInput& in);    // same Debian package versions
std::vector<Row> check_mpi(const DoctorInput& in);         // same MPI implementation and version
std::vector<Row> check_shared_dir(const DoctorInput& in);  // a token written on one is read on all
std::vector<Row> check_ports(const DoctorInput& in);       // pairwise TCP on the port range
std::vector<Row> check_clock(const DoctorInput& in);       // skew against the head
std::vector<Row> check_resources(const DoctorInput& in);   // cores, memory, disk
std::vector<Row> check_blas(const DoctorInput& in);        // the BLAS libtorch will use
std::vector<Row> check_gpu(const DoctorInput& in);         // GPUs, driver, CUDA, NCCL; ranks per GPU
// Full mode: latency and bandwidth rows per pair, and their matrices.
std::vector<Row> check_perf(const DoctorInput& in, std::vector<Matrix>* matrices);

// Every check, in order, plus the per-host summary lines.
Report build_report(const DoctorInput& in);

// Shared by the checks: a list for a message, "a, b, c".
inline std::string join(const std::vector<std::string>& v, const char* sep = ", ") {
  std::string s;
  for (const auto& x : v) s += (s.empty() ? "" : sep) + x;
  return s;
}
inline bool contains(const std::string& s, const char* what) { return s.find(what) != std::string::npos; }
// Did this host's probe report its facts?
inline bool probed(const HostOutcome& h) { return h.facts.has_value(); }
// A row for a host whose facts are missing.
Row skipped_row(const HostOutcome& h, const std::string& check);
// "7.6 GiB"
std::string gib(std::uint64_t bytes);

}  // namespace hpct::doctor
