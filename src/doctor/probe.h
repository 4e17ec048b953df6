// The remote side of `hpctrain doctor`: `hpctrain doctor --probe ...`, run on
// every host over ssh (or forked on this one). It is the hpctrain binary
// itself, so what it reports (version, build hash of /proc/self/exe) is what
// `hpctrain launch` would run there.
//
// Protocol, one line each way, the probe's lines JSON:
//   1. The probe takes its host's facts (facts.h), writes its token into the
//      shared directory, binds its listeners on the port range, then prints
//      {"phase":"facts","facts":{...}}.
//   2. "time"        -> {"phase":"time","time_ns":N}: the head brackets the
//                       reply with its own clock to estimate skew.
//   3. "go {JSON}"   -> {"phase":"pairs",...}: the probe reads every other
//                       host's token and connects to every other host's
//                       listeners (bounded by connect_timeout_s), then reports.
//   4. "measure {JSON}" -> {"phase":"measure",...}: latency (1-byte round
//                       trips) and bandwidth (a short bulk send) to one peer;
//                       the head asks one pair at a time so they do not
//                       share the links.
//   5. End of stdin (the head closed it, or ssh died): the probe removes its
//      token, closes its listeners and exits 0.
// The probe never waits longer than its lifetime, whatever the head does.
#pragma once

#include <string>
#include <vector>

#include "doctor/facts.h"

namespace hpct::doctor {

// The ports every host listens on for the pair checks. lo == hi == 0 means
// "ephemeral": two ports the kernel picks, as the job's store and Gloo do.
struct PortRange {
  int lo = 0, hi = 0;
  bool ephemeral() const { return lo == 0; }
  std::string text() const;  // "29500-29510" or "ephemeral"
};

// "29500-29510", "29500" or "ephemeral". InvalidArgument for anything else,
// for ports outside 1..65535 and for ranges wider than 64 ports (every host
// binds each one).
PortRange parse_port_range(const std::string& text);

struct ProbeOptions {
  std::string listed_name;  // this host's name in the hostfile
  int index = 0;            // its position there
  std::string run_id;       // names this run's token files
  std::string shared_dir;   // empty: no token
  PortRange ports;
  std::string version, git; // of the binary running the probe
  double lifetime_s = 120;  // exit after this long whatever happens
};

// "<dir>/.hpctrain-doctor-<run_id>-<index>"
std::string token_path(const std::string& dir, const std::string& run_id, int index);
// What host `index` writes there.
std::string token_text(const std::string& run_id, int index);

// Runs the probe protocol on in_fd/out_fd (stdin/stdout). Blocks until the
// head closes in_fd or the lifetime ends; returns the exit code.
int run_probe(const ProbeOptions& options, int in_fd, int out_fd);

// Step 1's facts, without the listeners (used by run_probe). Blocks up to a
// few seconds (mpirun --version is bounded).
HostFacts collect_host_facts(const ProbeOptions& options);

// SHA-256 of a file, hex. Io naming the file when it cannot be read.
std::string file_sha256(const std::string& path);
// The build's fingerprint: the SHA-256 of `exe` when it has no hpctrain-torch
// beside it, else the SHA-256 of both files' digests, so a host whose torch
// half differs (or is missing) shows up as another build.
std::string build_sha256(const std::string& exe);

// The facts of the head itself, that every host is compared against.
HeadFacts local_head_facts(const std::string& version, const std::string& git);

}  // namespace hpct::doctor
