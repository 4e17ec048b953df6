// `hpctrain checkpoint`: sharded checkpoints (train/sharded_checkpoint.h)
// outside a job. `consolidate` turns one into a single ordinary file, for
// torch in Python or for an unsharded `hpctrain train --resume`; `inspect`
// prints its index in short. Both read every shard file whole and check it
// against the index's CRC first. They live in hpctrain-torch (libtorch
// writes the files).
#include <cstdio>
#include <iostream>
#include <nlohmann/json.hpp>

#include "commands.h"
#include "core/error.h"
#include "core/log.h"
#include "train/sharded_checkpoint_torch.h"

namespace hpct::cli {
namespace {

struct ConsolidateOptions {
  std::string path;
  std::string out;
  std::string format = "torch";
};

int run_consolidate(const Cli& cli, const ConsolidateOptions& o) {
  if (o.format != "torch" && o.format != "hpctrain") {
    throw_invalid_argument("--format " + o.format +
                           ": choose torch (torch.load) or hpctrain (train --resume)");
  }
  Logger log = Logger::from_config(cli.config, -1);
  auto files = train::posix_checkpoint_files();
  auto index = train::open_sharded_checkpoint(*files, o.path, log);
  if (o.format == "torch") {
    train::consolidate_for_torch(*files, index, o.out);
  } else {
    train::consolidate_for_hpctrain(*files, index, o.out);
  }
  nlohmann::json j;
  j["consolidated"] = index.index_path;
  j["step"] = index.step;
  j["world_size"] = index.world_size;
  j["tensors"] = index.tensors.size();
  j["format"] = o.format;
  j["out"] = o.out;
  std::cout << j.dump() << std::endl;
  return 0;
}

int run_inspect(const Cli& cli, const std::string& path) {
  Logger log = Logger::from_config(cli.config, -1);
  auto files = train::posix_checkpoint_files();
  auto index = train::open_sharded_checkpoint(*files, path, log);
  nlohmann::json j;
  j["index"] = index.index_path;
  j["step"] = index.step;
  j["world_size"] = index.world_size;
  j["meta"] = index.meta;
  std::uint64_t bytes = 0;
  for (const auto& f : index.files) bytes += f.bytes;
  j["files"] = index.files.size();
  j["bytes"] = bytes;
  nlohmann::json tensors = nlohmann::json::object();
  for (const auto& [name, t] : index.tensors) {
    tensors[name] = {{"shape", t.shape}, {"dtype", t.dtype}, {"pieces", t.pieces.size()}};
  }
  j["tensors"] = tensors;
  std::cout << j.dump(1) << std::endl;
  return 0;
}

}  // namespace

void add_checkpoint_command(CLI::App& app, Cli& cli) {
  auto* c =
      app.add_subcommand("checkpoint", "Sharded checkpoints: consolidate into one file, inspect");
  c->require_subcommand(1);
  auto o = std::make_shared<ConsolidateOptions>();
  auto* cons =
      c->add_subcommand("consolidate",
                        "One ordinary file from a sharded checkpoint: for torch.load, or for "
                        "`hpctrain train --resume`");
  cons->add_option(
          "DIR", o->path,
          "A checkpoint directory (its newest whole sharded checkpoint), a sharded-<step> folder "
          "or its index.json")
      ->required();
  cons->add_option("-o,--out", o->out, "The file to write")->required();
  cons->add_option(
          "--format", o->format,
          "torch: a dict of tensors torch.load reads (weights_only); hpctrain: today's checkpoint "
          "(payload and its .json manifest) for `hpctrain train --resume FILE`")
      ->capture_default_str();
  cons->callback([&cli, o] { cli.run = [&cli, o] { return run_consolidate(cli, *o); }; });
  auto path = std::make_shared<std::string>();
  auto* insp = c->add_subcommand(
      "inspect", "A sharded checkpoint's step, world size, files and tensors (JSON)");
  insp->add_option("DIR", *path,
                   "A checkpoint directory, a sharded-<step> folder or its index.json")
      ->required();
  insp->callback([&cli, path] { cli.run = [&cli, path] { return run_inspect(cli, *path); }; });
}

}  // namespace hpct::cli
