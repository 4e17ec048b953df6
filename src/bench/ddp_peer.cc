#include "bench/ddp_peer.h"

#include <stdlib.h>

#include <cerrno>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>

#include "core/clock.h"
#include "core/error.h"
#include "core/subprocess.h"

namespace hpct::bench {

int run_ddp_peer(const DdpPeerOptions& o, const std::vector<nlohmann::json>& ours) {
  namespace fs = std::filesystem;
  const bool across_hosts = static_cast<bool>(o.launch_prefix);
  int worst = 0;
  for (const auto& j : ours) {
    const int np = j["np"].get<int>();
    const fs::path base = o.tmp_dir.empty() ? fs::temp_directory_path() : fs::path(o.tmp_dir);
    std::string dir = (base / "hpctrain-ddp-XXXXXX").string();
    if (::mkdtemp(dir.data()) == nullptr) throw_io("mkdtemp " + dir, errno);
    const std::string result = dir + "/result.json";
    std::vector<std::string> argv;
    const std::vector<std::string> common = {"--model",   o.model,
                                             "--steps",   std::to_string(o.steps),
                                             "--batch",   std::to_string(o.batch),
                                             "--threads", std::to_string(o.threads),
                                             "--warmup",  std::to_string(o.warmup)};
    if (across_hosts) {
      argv = o.launch_prefix(np, {{"GLOO_SOCKET_IFNAME", o.interface},
                                  {"MASTER_ADDR", o.master},
                                  {"MASTER_PORT", std::to_string(o.port)},
                                  {"OMP_NUM_THREADS", std::to_string(o.threads)},
                                  {"OPENBLAS_NUM_THREADS", std::to_string(o.threads)}});
      argv.insert(argv.end(), {o.python, o.script, "ddp-rank", "--result-file", result});
    } else {
      argv = {o.python, o.script, "ddp", "--np", std::to_string(np)};
    }
    argv.insert(argv.end(), common.begin(), common.end());
    std::fflush(stdout);
    auto r = run_subprocess(argv, {}, seconds_to_millis(o.timeout_s));
    nlohmann::json d;
    if (across_hosts) {
      std::ifstream in(result);
      std::string line;
      if (std::getline(in, line)) d = nlohmann::json::parse(line, nullptr, false);
    }
    std::error_code ec;
    fs::remove_all(dir, ec);
    if (r.timed_out || r.signal != 0 || r.exit_code != 0 || (across_hosts && !d.is_object())) {
      std::fprintf(stderr, "hpctrain: bench train --peer ddp failed: %s\n",
                   join_command(argv).c_str());
      worst = worst ? worst : 1;
      continue;
    }
    if (!across_hosts) continue;  // ddp_peer.py printed its line; no file to read it back from
    const double ours_sps = j["samples_per_s"].get<double>();
    const double theirs = d["samples_per_s"].get<double>();
    std::cout << nlohmann::json{{"bench", "train"},
                                {"summary", o.model},
                                {"np", np},
                                {"hpctrain_samples_per_s", ours_sps},
                                {"ddp_samples_per_s", theirs},
                                {"ratio", theirs > 0 ? ours_sps / theirs : 0.0}}
                     .dump()
              << std::endl;
  }
  return worst;
}

}  // namespace hpct::bench
