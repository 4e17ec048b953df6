// Subcommands that hpctrain hands to a sibling executable: hpctrain does not
// load libtorch (its start costs ~1 s before main), so train and the torch
// benchmarks run in hpctrain-torch, started by exec with the same argv.
#include <unistd.h>

#include <cerrno>

#include "commands.h"
#include "core/error.h"
#include "core/subprocess.h"

namespace hpct::cli {

void add_forwarded_command(CLI::App& parent, Cli& cli, const std::string& name,
                           const std::string& description, const std::string& executable) {
  auto* c = parent.add_subcommand(name, description);
  // Every argument after the name, --help included, is the other executable's.
  c->set_help_flag();
  c->prefix_command();
  const std::string command = (parent.get_parent() ? parent.get_name() + " " : "") + name;
  c->callback([&cli, executable, command] {
    cli.forward_to = executable;
    cli.forward_command = command;
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

}  // namespace hpct::cli
