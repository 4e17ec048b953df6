// `hpctrain doctor`, the head's side: starts a probe (probe.h) on every
// listed host at once, over ssh or by fork on this host, walks them through
// the protocol's phases with a bound on each, and turns what they report
// into a Report (checks.h). A dead or silent host costs one bound, not one
// per host: all sessions are driven together.
#pragma once

#include <string>
#include <vector>

#include "doctor/probe.h"
#include "doctor/report.h"
#include "launch/hostfile.h"
#include "launch/ssh_spawner.h"

namespace hpct::doctor {

struct DoctorOptions {
  std::vector<launch::HostEntry> hosts;
  std::string shared_dir;          // absolute; empty: not checked
  PortRange ports;                 // ephemeral by default
  bool quick = false;              // no latency/bandwidth matrix
  launch::SshOptions ssh;          // BatchMode etc. come from SshSpawner::ssh_options()
  std::string version, git;        // of this binary, passed to every probe
  double probe_timeout_s = 15;     // from starting a probe to its facts, ssh login included
  double connect_timeout_s = 2;    // each pairwise TCP connect
  double resolve_timeout_s = 3;    // resolving the listed names here
};

// InvalidArgument for unusable options (relative shared dir, no hosts).
// Blocks for at most about probe_timeout_s + connect_timeout_s + a few
// seconds (plus 6 s per pair in full mode). Not thread-safe with itself
// only because it forks; runs from the thread that owns the process.
Report run_doctor(const DoctorOptions& options);

}  // namespace hpct::doctor
