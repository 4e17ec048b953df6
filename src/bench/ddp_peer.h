// `hpctrain bench train --peer ddp`: PyTorch DDP (gloo) with the same model,
// batch, steps and threads as our runs, through bench/ddp_peer.py: locally
// (`ddp_peer.py ddp --np N`, which prints its own line) or, across hosts,
// one `ddp_peer.py ddp-rank` per rank started by the caller's launch prefix
// (hpctrain launch on the same hosts, GLOO_SOCKET_IFNAME set); then a
// summary line per rank count with hpctrain's samples/s over DDP's.
#pragma once

#include <functional>
#include <map>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <vector>

namespace hpct::bench {

struct DdpPeerOptions {
  std::string model = "mlp";
  int steps = 300;
  int batch = 64;
  int threads = 1;
  int warmup = 10;
  std::string python = "/usr/bin/python3";
  std::string script;   // bench/ddp_peer.py
  std::string tmp_dir;  // where each run's directory goes (empty: the system's)
  double timeout_s = 3600;
  // Across hosts (set): the command prefix that starts np ranks with env;
  // the rendezvous (MASTER_ADDR, MASTER_PORT) and the interface for Gloo.
  std::function<std::vector<std::string>(int np, const std::map<std::string, std::string>& env)>
      launch_prefix;
  std::string master;
  int port = 29500;
  std::string interface = "eth0";
};

// One DDP run per line of `ours` (its np), each bounded by timeout_s; prints
// the summary lines on stdout. Returns 0, or 1 after one line on stderr per
// failed run naming its command.
int run_ddp_peer(const DdpPeerOptions& o, const std::vector<nlohmann::json>& ours);

}  // namespace hpct::bench
