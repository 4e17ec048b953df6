// `hpctrain config`: every setting, its effective value, where it came from.
#include <cstdio>

#include <nlohmann/json.hpp>

#include "commands.h"

namespace hpct::cli {
namespace {

const char* source_name(ConfigSource s) {
  switch (s) {
    case ConfigSource::kDefault: return "default";
    case ConfigSource::kEnv: return "env";
    case ConfigSource::kFlag: return "flag";
  }
  return "?";
}

}  // namespace

void print_config(const Config& config, bool json) {
  for (const auto& e : config.describe()) {
    if (json) {
      nlohmann::json j = {{"name", e.env_name}, {"flag", e.flag_name}, {"type", e.type},
                          {"value", e.value}, {"default", e.default_value},
                          {"source", source_name(e.source)}, {"doc", e.doc}};
      std::printf("%s\n", j.dump().c_str());
    } else {
      std::printf("%-24s %-14s %-8s %s\n", e.env_name.c_str(),
                  e.value.empty() ? "\"\"" : e.value.c_str(), source_name(e.source), e.doc.c_str());
    }
  }
}

void add_config_command(CLI::App& app, Cli& cli) {
  auto* cmd = app.add_subcommand("config", "Print every HPCT_* setting: effective value, source, doc");
  auto json = std::make_shared<bool>(false);
  cmd->add_flag("--json", *json, "One JSON object per line");
  cmd->callback([&cli, json] {
    cli.run = [&cli, json] {
      print_config(cli.config, *json);
      return 0;
    };
  });
}

}  // namespace hpct::cli
