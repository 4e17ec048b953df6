// `hpctrain checkpoint consolidate --format hpctrain` (label integration): a
// CNN trained two steps with Adam, written as a 3-rank sharded checkpoint,
// consolidated by the CLI into today's checkpoint (payload and manifest),
// read back as `hpctrain train --resume` reads it: every parameter and
// every Adam state bit for bit, each rank's bytes, and a further step from
// the restored model and optimizer equal to one from the originals. And
// through the real trainer: a 2-rank run's whole checkpoint at step 6,
// rewritten as a 2-rank sharded checkpoint and consolidated back, resumes
// under `hpctrain launch` and ends with the uninterrupted run's parameters.
#include <gtest/gtest.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <filesystem>

#include "core/error.h"
#include "fashion_shards.h"
#include "train/checkpoint.h"
#include "train/models.h"
#include "train/scripted_model.h"
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
  std::string cmd = "timeout 300 " + std::string(HPCT_BINARY) + " " + args + " 2>&1";
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
  auto a = model->parameters();
  auto b = model2->parameters();
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

// The summary line of a train run's output; null when there is none.
nlohmann::json summary_of(const std::string& out) {
  std::size_t at = out.rfind("{\"");
  while (at != std::string::npos) {
    auto end = out.find('\n', at);
    auto j = nlohmann::json::parse(out.substr(at, end == std::string::npos ? end : end - at),
                                   nullptr, false);
    if (!j.is_discarded() && j.value("type", "") == "summary") return j;
    at = at == 0 ? std::string::npos : out.rfind("{\"", at - 1);
  }
  return nullptr;
}

// A whole checkpoint of the trainer, rewritten as a sharded one of the same
// world size (what `train --shard` writes), with every rank's bytes.
void rewrite_sharded(const std::string& whole, const std::string& dir, const TrainOptions& o) {
  torch::serialize::InputArchive ar;
  ar.load_from(checkpoint_at(whole).payload_path);
  auto model = open_model(o.model);
  auto opt = make_optimizer(o, *model);
  torch::serialize::InputArchive m, op;
  ar.read("model", m);
  model->load(m);
  ar.read("optimizer", op);
  opt->load(op);
  torch::Tensor world, step, epoch, done;
  ar.read("world_size", world);
  ar.read("step", step);
  ar.read("epoch", epoch);
  ar.read("epoch_done", done);
  const int n = static_cast<int>(world.item<std::int64_t>());
  NamedTensors tensors = training_tensors(*model, *opt);
  auto files = posix_checkpoint_files();
  std::vector<ShardFile> shards;
  for (int r = 0; r < n; ++r) {
    NamedTensors own;
    for (const char* what : {"rng", "loader"}) {
      torch::Tensor t;
      ar.read(std::string(what) + "/" + std::to_string(r), t);
      own.emplace_back("rank/" + std::to_string(r) + "/" + what, t.contiguous());
    }
    auto pieces = contiguous_pieces(tensors, r, n);
    for (auto& p : contiguous_pieces(own, 0, 1)) pieces.push_back(p);
    shards.push_back(write_shard(*files, dir, step.item<std::int64_t>(), r, n, pieces));
  }
  nlohmann::json meta;
  meta["train"] = {{"model", o.model},
                   {"optimizer", o.optimizer},
                   {"lr", o.lr},
                   {"epoch", epoch.item<std::int64_t>()},
                   {"epoch_done", done.item<std::int64_t>() != 0}};
  write_index(*files, dir, step.item<std::int64_t>(), n, shards, meta);
}

TEST(CheckpointCli, TrainerResumesFromAConsolidatedCheckpointBitExact) {
  auto data = hpct::test::FashionShards::in_temp_dir("hpct-ckpt-cli", 500);
  ASSERT_TRUE(data.ok()) << data.output();
  const std::string d = data.dir();
  auto train = [&](const std::string& extra) {
    return run("launch -np 2 -- " + std::string(HPCT_BINARY) +
               " train --model cnn --optimizer adam --lr 0.01 " + "--data '" + data.range(0, 2) +
               "' --epochs 1 --batch 16 --threads 1 --seed 3 --log-every 3 " + "--progress lines " +
               extra);
  };
  CliRun full = train("--max-steps 12 --checkpoint-every 6 --checkpoint-dir " + d + "/a");
  ASSERT_EQ(full.exit_code, 0) << full.out;
  auto full_summary = summary_of(full.out);
  ASSERT_FALSE(full_summary.is_null()) << full.out;

  TrainOptions o;
  o.model = "cnn";
  o.optimizer = "adam";
  o.lr = 0.01;
  rewrite_sharded(d + "/a/ckpt-0000000006.json", d + "/sharded", o);
  CliRun c =
      run("checkpoint consolidate " + d + "/sharded -o " + d + "/whole.pt --format hpctrain");
  ASSERT_EQ(c.exit_code, 0) << c.out;

  CliRun resumed = train("--max-steps 12 --resume " + d + "/whole.pt --checkpoint-dir " + d + "/c");
  ASSERT_EQ(resumed.exit_code, 0) << resumed.out;
  auto s = summary_of(resumed.out);
  ASSERT_FALSE(s.is_null()) << resumed.out;
  EXPECT_EQ(s["resumed_from_step"], 6) << resumed.out;
  EXPECT_EQ(s["params_crc32c"], full_summary["params_crc32c"]) << resumed.out << full.out;
}

}  // namespace
}  // namespace hpct::train
