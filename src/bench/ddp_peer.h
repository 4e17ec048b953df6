// `hpctrain bench train --peer ddp`: PyTorch DDP (gloo) with the same model,
// batch, steps and threads as our runs, through bench/ddp_peer.py: locally
// (`ddp_peer.py ddp --np N`) or, across hosts, one `ddp_peer.py ddp-rank` per
// rank started by the caller's launch prefix (hpctrain launch on the same
// hosts, GLOO_SOCKET_IFNAME set). DDP may run with one of its own comm hooks
// (--peer-hook: fp16_compress_hook, powerSGD_hook). The CLI alternates these
// runs with its own (bench_train_command.cc) and prints one summary line per
// rank count and hook: medians over the repeats and the ratio.
//
// A peer that crashes is a result, not an error of the benchmark: its line
// says "failed": true and "error": the crash's text, read from the copy of
// its stderr that the script keeps in the run's directory (a C++ abort in
// gloo leaves no Python exception behind). Every run is bounded:
// collective_timeout_s bounds each collective (the process group's timeout)
// and each step (the script's watchdog: DDP's PowerSGD hook can also hang,
// beyond gloo's timeout), timeout_s the whole run.
#pragma once

#include <functional>
#include <map>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <vector>

namespace hpct::bench {

struct DdpPeerOptions {
  std::string model = "mlp";
  std::string hook = "none";  // none, fp16 or powersgd:R[:START] (check_peer_hook)
  int steps = 300;
  int batch = 64;
  int threads = 1;
  int warmup = 10;
  bool evaluate = false;  // also report the test set's accuracy after training
  int max_samples = 0;    // > 0: train on the first max_samples images only
  // > 0: DDP's bucket_cap_mb and its first bucket's size (MiB); 0: DDP's
  // defaults (25 MiB, first 1 MiB). Above the model's size: one bucket, with
  // which DDP's PowerSGD hook does not crash (its buckets' collectives can
  // otherwise run in a different order on each rank).
  double bucket_mb = 0;
  std::string python = "/usr/bin/python3";
  std::string script;   // bench/ddp_peer.py
  std::string tmp_dir;  // where each run's directory goes (empty: the system's); shared by the hosts
  double timeout_s = 3600;            // bound on the run
  double collective_timeout_s = 120;  // the process group's timeout and the bound on one step
  // Across hosts (set): the command prefix that starts np ranks with env;
  // the rendezvous (MASTER_ADDR, MASTER_PORT) and the interface for Gloo.
  std::function<std::vector<std::string>(int np, const std::map<std::string, std::string>& env)>
      launch_prefix;
  std::string master;
  int port = 29500;
  std::string interface = "eth0";
};

// InvalidArgument naming the choices unless spec is none, fp16 or
// powersgd:R[:START] with R >= 1 (START: DDP's start_powerSGD_iter, at
// least 2; default max(2, warmup)).
void check_peer_hook(const std::string& spec);

// One DDP run of np ranks; blocks for it, at most o.timeout_s. Returns DDP's
// JSON line (impl pytorch-ddp, hook, samples_per_s, with evaluate
// test_accuracy), or for a run that failed or timed out a line with the run's
// settings, "failed": true and "error"; then the tail of its stderr also
// goes to this process's stderr; a run that made no progress within
// collective_timeout_s (the watchdog's hang, not a crash) also has
// "hung": true. Io when the run's directory cannot be made.
nlohmann::json run_ddp_peer_once(const DdpPeerOptions& o, int np);

// The crash in a peer's stderr as one line: an uncaught C++ exception's type
// and what() ("gloo::EnforceNotMet: [enforce fail at ...] ..."), else the
// last Python exception line ("RuntimeError: ..."), else the last non-empty
// line; at most 500 characters. Empty for an empty log.
std::string peer_error_text(const std::string& log);

// The root crash over every rank's log, in rank order: the first crash that
// is an exception and not a lost peer ("Connection reset by peer" on the
// ranks that outlived the one that aborted), else the first exception, else
// the first rank's text. Empty when no log says anything.
std::string peer_root_error_text(const std::vector<std::string>& logs);

// Per (np, hook) of the DDP lines, in the order first seen: the medians of
// our samples/s (the lines of `ours` with that np) and of DDP's over their
// repeats, and their ratio; with test accuracies, their medians too. A hook
// that failed in any repeat gets "ddp_failed": true and the first "ddp_error"
// instead of DDP's figures.
std::vector<nlohmann::json> peer_summaries(const std::vector<nlohmann::json>& ours,
                                           const std::vector<nlohmann::json>& ddp);

}  // namespace hpct::bench
