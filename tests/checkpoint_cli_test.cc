// `hpctrain checkpoint consolidate --format hpctrain` (label integration): a
// CNN trained two steps with Adam, written as a 3-rank sharded checkpoint,
// consolidated by the CLI into today's checkpoint (payload and manifest),
// read back as `hpctrain train --resume` reads it: every parameter and
// every Adam state bit for bit, each rank's bytes, and a further step from
// the restored model and optimizer equal to one from the originals.
#include <gtest/gtest.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <filesystem>

#include "core/error.h"
#include "train/checkpoint.h"
#include "train/models.h"
#include "train/sharded_checkpoint_torch.h"
#include "train/train_setup.h"
#include "train/training_state.h"

namespace hpct::train {
namespace {

namespace fs = std::filesystem;

struct CliRun {
  int exit_code = -1;
  std::string out;
};

CliRun run(const std::string& args) {
  CliRun r;
  std::string cmd = std::string(HPCT_BINARY) + " " + args + " 2>&1";
  FILE* p = ::popen(cmd.c_str(), "r");
  if (!p) return r;
  std::array<char, 4096> buf;
  std::size_t n;
  while ((n = std::fread(buf.data(), 1, buf.size(), p)) > 0) r.out.append(buf.data(), n);
  int status = ::pclose(p);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

void train_steps(Model& model, torch::optim::Optimizer& opt, int steps, std::uint64_t seed) {
  torch::manual_seed(seed);
  for (int s = 0; s < steps; ++s) {
    auto x = torch::randn({4, 1, 28, 28});
    auto y = torch::randint(0, 10, {4}, torch::kLong);
    opt.zero_grad();
    torch::nn::functional::cross_entropy(model.forward(x), y).backward();
    opt.step();
  }
}

TEST(CheckpointCli, ConsolidatedForHpctrainResumesBitExact) {
  std::string tmpl = (fs::temp_directory_path() / "hpct-ckpt-cli-XXXXXX").string();
  ASSERT_NE(::mkdtemp(tmpl.data()), nullptr);
  const std::string dir = tmpl;
  TrainOptions o;
  o.model = "cnn";
  o.optimizer = "adam";
  o.lr = 0.01;
  torch::manual_seed(1);
  auto model = open_model("cnn");
  auto opt = make_optimizer(o, *model);
  train_steps(*model, *opt, 2, 5);

  // Three ranks' shards: an even split of every tensor, each rank's bytes.
  auto files = posix_checkpoint_files();
  NamedTensors tensors = training_tensors(*model, *opt);
  std::vector<ShardFile> shards;
  for (int r = 0; r < 3; ++r) {
    NamedTensors own = {
        {"rank/" + std::to_string(r) + "/rng", torch::full({9 + r}, 40 + r, torch::kUInt8)},
        {"rank/" + std::to_string(r) + "/loader", torch::full({3}, 7 * r, torch::kUInt8)}};
    auto pieces = contiguous_pieces(tensors, r, 3);
    for (auto& p : contiguous_pieces(own, 0, 1)) pieces.push_back(p);
    shards.push_back(write_shard(*files, dir + "/ckpt", 2, r, 3, pieces));
  }
  nlohmann::json meta;
  meta["train"] = {
      {"model", "cnn"}, {"optimizer", "adam"}, {"lr", 0.01}, {"epoch", 0}, {"epoch_done", false}};
  write_index(*files, dir + "/ckpt", 2, 3, shards, meta);

  const std::string out = dir + "/whole.pt";
  CliRun c = run("checkpoint consolidate " + dir + "/ckpt -o " + out + " --format hpctrain");
  ASSERT_EQ(c.exit_code, 0) << c.out;
  EXPECT_NE(c.out.find("\"world_size\":3"), std::string::npos) << c.out;

  // As resume_point reads it: manifest, payload, archive.
  std::string payload = read_checkpoint(checkpoint_at(out));
  torch::serialize::InputArchive ar;
  std::istringstream ss(payload);
  ar.load_from(ss);
  torch::manual_seed(99);
  auto model2 = open_model("cnn");
  auto opt2 = make_optimizer(o, *model2);
  torch::serialize::InputArchive m, op;
  ar.read("model", m);
  model2->load(m);
  ar.read("optimizer", op);
  opt2->load(op);
  torch::Tensor world, rng1;
  ar.read("world_size", world);
  ar.read("rng/1", rng1);
  EXPECT_EQ(world.item<std::int64_t>(), 3);
  EXPECT_TRUE(torch::equal(rng1, torch::full({10}, 41, torch::kUInt8)));
  NamedTensors back = training_tensors(*model2, *opt2);
  ASSERT_EQ(back.size(), tensors.size());
  for (std::size_t i = 0; i < back.size(); ++i) {
    EXPECT_EQ(back[i].first, tensors[i].first);
    EXPECT_TRUE(torch::equal(back[i].second, tensors[i].second)) << tensors[i].first;
  }
  // One more step each: Adam's step counts and moments came back too.
  train_steps(*model, *opt, 1, 6);
  train_steps(*model2, *opt2, 1, 6);
  auto a = model->parameters(), b = model2->parameters();
  for (std::size_t i = 0; i < a.size(); ++i) EXPECT_TRUE(torch::equal(a[i], b[i])) << i;

  // inspect names the tensors; a -o ending .json is refused (the manifest goes there).
  CliRun insp = run("checkpoint inspect " + dir + "/ckpt");
  EXPECT_EQ(insp.exit_code, 0) << insp.out;
  EXPECT_NE(insp.out.find("\"optim/conv1.weight/exp_avg\""), std::string::npos) << insp.out;
  CliRun bad =
      run("checkpoint consolidate " + dir + "/ckpt -o " + dir + "/x.json --format hpctrain");
  EXPECT_NE(bad.exit_code, 0);
  EXPECT_NE(bad.out.find("name the payload"), std::string::npos) << bad.out;
  fs::remove_all(dir);
}

}  // namespace
}  // namespace hpct::train
