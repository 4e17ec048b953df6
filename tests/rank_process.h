// Finds a running rank's process from a test, to stop or kill it as a
// fault would (the tests that kill a rank mid-run).
#pragma once

#include <sys/types.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

namespace hpct::test {

// The pid of the `hpctrain train` process of `rank` whose command line
// names `marker`, or 0.
inline pid_t find_train_rank(const std::string& marker, int rank) {
  namespace fs = std::filesystem;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator("/proc", ec)) {
    std::string name = e.path().filename().string();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::ifstream cl(e.path() / "cmdline");
    std::string cmd((std::istreambuf_iterator<char>(cl)), std::istreambuf_iterator<char>());
    if (cmd.find(marker) == std::string::npos ||
        cmd.find(std::string("train") + '\0') == std::string::npos)
      continue;
    std::ifstream en(e.path() / "environ");
    std::string env((std::istreambuf_iterator<char>(en)), std::istreambuf_iterator<char>());
    if (env.find(std::string("HPCT_RANK=") + std::to_string(rank) + '\0') != std::string::npos) {
      return static_cast<pid_t>(std::stoi(name));
    }
  }
  return 0;
}

}  // namespace hpct::test
