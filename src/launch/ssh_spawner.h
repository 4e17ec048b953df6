// SshSpawner: one ssh session per remote rank (ranks on this machine are
// forked as LocalSpawner does). ssh runs non-interactively: BatchMode (a
// missing key fails at once instead of prompting for a password),
// ConnectTimeout, and keep-alives so a host that vanishes mid-job ends its
// session within about 15 s. No tty is requested: the session's stdin is the
// wrapper's teardown signal (rank_protocol.h, step 6).
#pragma once

#include <string>
#include <vector>

#include "launch/spawner.h"

namespace hpct::launch {

struct SshOptions {
  std::string ssh = "ssh";
  int port = 0;                        // -p; 0: ssh's default
  std::string identity;                // -i; empty: ssh's default keys
  double connect_timeout_s = 10;       // ConnectTimeout
  std::vector<std::string> options;    // extra -o KEY=VALUE
};

class SshSpawner final : public Spawner {
 public:
  explicit SshSpawner(SshOptions options) : options_(std::move(options)) {}
  const char* name() const override { return "ssh"; }
  std::vector<ProcessPlan> plan(const JobLayout& job) const override;

  // ssh and its options up to (not including) the host: shared with mpirun's
  // rsh agent settings.
  std::vector<std::string> ssh_options() const;

 private:
  SshOptions options_;
};

}  // namespace hpct::launch
