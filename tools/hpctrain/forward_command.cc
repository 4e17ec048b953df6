// Subcommands that hpctrain hands to a sibling executable: hpctrain does not
// load libtorch (its start costs ~1 s before main), so train and the torch
// benchmarks run in hpctrain-torch, started by exec with the same argv.
#include <unistd.h>

#include <cerrno>

#include "commands.h"
#include "core/error.h"
#include "comm/cuda/cuda_probe.h"
#include "core/subprocess.h"

namespace hpct::cli {

void add_forwarded_command(CLI::App& parent, Cli& cli, const std::string& name,
                           const std::string& description, const std::string& executable,
                           std::function<void(char** argv)> before_forward) {
  auto* c = parent.add_subcommand(name, description);
  // Every argument after the name, --help included, is the other executable's.
  c->set_help_flag();
  c->prefix_command();
  const std::string command = (parent.get_parent() ? parent.get_name() + " " : "") + name;
  c->callback([&cli, executable, command, before_forward] {
    cli.forward_to = executable;
    cli.forward_command = command;
    cli.before_forward = before_forward;
  });
}

void exec_sibling(const std::string& executable, const std::string& command, char** argv) {
  const std::string self = self_executable();
  const std::string path = self.substr(0, self.rfind('/') + 1) + executable;
  ::execv(path.c_str(), argv);
  throw_io("`hpctrain " + command + "` runs in " + path +
               ", which did not start (build or install " + executable + " next to " + self +
               ": cmake --build BUILD_DIR --target " + executable + ")",
           errno);
}

void check_train_device(char** argv) {
  std::string value;
  for (int i = 1; argv[i] != nullptr; ++i) {
    const std::string a = argv[i];
    if (a == "--device" && argv[i + 1] != nullptr) value = argv[i + 1];
    if (a.rfind("--device=", 0) == 0) value = a.substr(9);
  }
  if (value.rfind("cuda", 0) != 0) return;
  int index = 0;
  if (value != "cuda") {
    if (value.size() < 6 || value[4] != ':' ||
        value.find_first_not_of("0123456789", 5) != std::string::npos)
      return;  // hpctrain-torch names the mistake
    index = std::stoi(value.substr(5));
  }
  const std::string what = "--device cuda:" + std::to_string(index);
  std::string why;
  const int count = comm::cuda_device_count(&why);
  if (count == 0) {
    throw_invalid_argument(what + ": no GPU found (" + why +
                           "); run on a host with an NVIDIA GPU and driver, or use --device cpu");
  }
  if (index >= count) {
    throw_invalid_argument(what + ": this host has " + std::to_string(count) +
                           " GPU(s), numbered from 0; use --device cuda:0" +
                           (count > 1 ? " to cuda:" + std::to_string(count - 1) : ""));
  }
}

}  // namespace hpct::cli
