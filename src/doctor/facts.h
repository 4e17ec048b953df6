// The facts a probe reports about its host, and what the head learns about
// each host and pair while it runs the probes. The checks (checks.h) turn
// these into verdicts; keeping them plain values lets unit tests feed the
// checks any cluster without starting one.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "doctor/gpu.h"

namespace hpct::doctor {

struct MpiFacts {
  bool found = false;
  std::string implementation;  // "Open MPI", "MPICH", "Intel MPI", "MVAPICH2", "unknown"
  std::string version;         // "4.1.4"
  std::string path;            // mpirun as found in PATH, e.g. /usr/bin/mpirun
  std::string resolved;        // after symlinks: /usr/bin/mpirun.openmpi
  std::string error;           // why it was not found or not understood
};

struct BlasFacts {
  std::string path;     // the file libblas.so.3 resolves to; empty: none installed
  std::string kind;     // "OpenBLAS", "BLIS", "MKL", "ATLAS", "reference", "unknown", "none"
  std::string variant;  // "pthread", "openmp", "serial" where the path says so
};

// One JSON line from `hpctrain doctor --probe`, about the host it ran on.
struct HostFacts {
  std::string version;       // HPCT_VERSION of the probe binary
  std::string git;           // its git description
  std::string exe;           // /proc/self/exe
  std::string build_sha256;  // of /proc/self/exe and hpctrain-torch beside it (build_sha256())
  std::string user;          // effective user name
  int uid = -1, gid = -1;    // its ids (-1: an older probe did not say)
  std::map<std::string, std::string> packages;  // tracked Debian packages -> version (packages.h)
  std::string hostname;      // gethostname()
  std::vector<std::string> hostname_addrs;  // what hostname resolves to there
  std::vector<std::string> listed_addrs;    // what the name in the hostfile resolves to there
  std::string loopback_hosts_line;          // the /etc/hosts line mapping either to 127.x, verbatim
  std::vector<std::string> interface_addrs; // non-loopback IPv4 addresses
  int cores = 0;                // usable by this process (affinity)
  std::uint64_t mem_total = 0;  // bytes
  std::uint64_t mem_available = 0;
  std::string disk_path;        // where free space was measured
  std::uint64_t disk_free = 0;
  std::int64_t time_ns = 0;     // wall clock when the facts were taken
  MpiFacts mpi;
  BlasFacts blas;
  GpuFacts gpu;                 // GPUs, driver, CUDA, NCCL (gpu.h); an older probe: none, no error
  std::string shared_dir;       // empty: not checked
  bool token_written = false;
  std::string token_error;
  std::vector<int> ports;             // listening for the pair checks
  std::vector<std::string> port_errors;  // "29501: Address already in use"
};

nlohmann::json to_json(const HostFacts& f);
// Missing fields keep their defaults so an older probe still reports what it
// knows; a non-object raises DataCorrupt.
HostFacts host_facts_from_json(const nlohmann::json& j);

// A TCP connect from one host to another's listener.
struct ConnectResult {
  int from = 0, to = 0;  // host indexes
  int port = 0;
  bool ok = false;
  std::string error;     // "Connection refused", "timed out after 2 s"
};

// How ssh on the head checks a host's key: what `ssh -G` says it will do
// with the options doctor uses, and which known_hosts file lists the host.
struct KnownHost {
  bool checked = false;          // looked up (remote hosts only)
  std::string strict;            // StrictHostKeyChecking as ssh -G prints it: true, false, ask, accept-new
  std::vector<std::string> files;  // the known_hosts files ssh reads, ~ expanded
  std::string lookup;            // the name looked up: host, or [host]:port
  std::string found_in;          // the file that lists it; empty: none
  std::string error;             // why it could not be looked up
};

// Latency and bandwidth of one ordered pair (full mode).
struct PairPerf {
  int from = 0, to = 0;
  double rtt_us = -1;  // median round trip of one byte
  double gbps = -1;    // one-way bulk transfer, Gbit/s
  std::string error;
};

// Everything the head knows about one listed host at the end of a run.
struct HostOutcome {
  std::string name;                    // as listed
  int slots = 1;                       // ranks the hostfile gives it (h:N, slots=N)
  std::vector<std::string> head_addrs; // the name resolved on the head
  std::string resolve_error;           // empty when it resolved
  bool local = false;                  // probed by fork/exec, not ssh
  bool session_ok = false;             // the probe printed its facts
  int exit_code = -1;                  // the probe's (ssh's) exit code when it ended early
  bool timed_out = false;              // no facts within the bound
  std::string stderr_text;             // ssh's or the probe's complaints, trimmed
  double connect_s = 0;                // from starting ssh to the facts line
  std::optional<HostFacts> facts;
  std::optional<double> clock_skew_s;  // host minus head
  double clock_error_s = 0;            // half the round trip of the time query
  std::vector<int> tokens_seen;        // indexes of hosts whose token this host read
  std::vector<int> tokens_missing;     // indexes it looked for and did not find
  std::string token_detail;            // "token of h2 not found" etc.
  KnownHost known;                     // the head's view of its host key
  bool pairs_reported = false;         // answered the connect phase
};

// What the head compares every host against: itself.
struct HeadFacts {
  std::string version, git, exe, build_sha256, user;
  int uid = -1, gid = -1;
};

struct DoctorInput {
  HeadFacts head;
  std::vector<HostOutcome> hosts;
  std::vector<ConnectResult> connects;
  std::vector<PairPerf> perf;  // empty in quick mode
  std::string shared_dir;      // empty: not checked
  std::string ports_text;      // "29500-29510" or "ephemeral"
  std::string ssh_identity;    // -i given to doctor, for the ssh-copy-id fix
  bool quick = true;
};

}  // namespace hpct::doctor
