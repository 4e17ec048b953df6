// `hpctrain train --model FILE.pt` end to end: a Fashion-MNIST CNN with batch
// norm and dropout, exported from Python by scripts/export_torchscript.py
// (torch from the index, HPCT_TORCH_PYTHON), trained from C++ on 2 ranks under `hpctrain
// launch` on real shards (the test split, packed once). Loss falls; every
// rank's final model, saved as TorchScript and compared tensor by tensor in
// Python, has the same parameters and the same buffers; resuming from the
// first epoch's checkpoint (which holds the buffers) ends bit-identical.
// Broken models fail with one readable line. Fails when that python3 cannot
// import torch.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli_summary_run.h"
#include "fashion_shards.h"

namespace {

namespace fs = std::filesystem;

using hpct::test::CliRun;
CliRun shell(const std::string& cmd) { return hpct::test::run_with_summary(cmd); }
CliRun run(const std::string& args) { return hpct::test::run_hpctrain(args); }

// The python3 with torch that hpctrain was built against (HPCT_TORCH_PYTHON),
// or $HPCT_TEST_PYTHON; empty when it cannot import torch.
std::string find_torch_python() {
  std::string py = HPCT_TORCH_PYTHON;
  if (const char* p = std::getenv("HPCT_TEST_PYTHON")) py = p;
  return shell(py + " -c 'import torch' >/dev/null").exit_code == 0 ? py : "";
}

class TrainTorchScript : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    python_ = find_torch_python();
    if (python_.empty()) return;
    shards_ = std::make_unique<hpct::test::FashionShards>(hpct::test::FashionShards::in_temp_dir("hpct-ts-test", 2500));
    dir_ = shards_->dir();
    ASSERT_TRUE(shards_->ok()) << shards_->output();
    CliRun r = shell(python_ + " " + HPCT_EXPORT_SCRIPT + " -o " + dir_ + "/fm_cnn.pt --seed 3");
    ASSERT_EQ(r.exit_code, 0) << r.out;
  }
  static void TearDownTestSuite() { shards_.reset(); }
  void SetUp() override {
    ASSERT_FALSE(python_.empty()) << HPCT_TORCH_PYTHON << " cannot import torch: run scripts/install-deps.sh";
  }

  // 7500 training samples, 2500 for validation, batch 32 per rank.
  static std::string train_args(const std::string& model, const std::string& extra) {
    return "train --model " + model + " --data '" + dir_ + "/fm-{000000..000002}.tar' --val " + dir_ +
           "/fm-000003.tar --batch 32 --lr 0.1 --threads 1 --seed 5 --progress lines " + extra;
  }

  static std::string python_;
  static std::unique_ptr<hpct::test::FashionShards> shards_;  // 4 shards of 2500 (the test split)
  static std::string dir_;
};
std::unique_ptr<hpct::test::FashionShards> TrainTorchScript::shards_;
std::string TrainTorchScript::python_;
std::string TrainTorchScript::dir_;

// Python's verdict on the per-rank models: {"identical": bool, "tensors": n,
// "num_batches_tracked": k, "running_var_moved": bool, "eval_out": [N, C]}.
const char* kCompare = R"PY(
import json, sys, torch
a, b = torch.jit.load(sys.argv[1]), torch.jit.load(sys.argv[2])
sa, sb = a.state_dict(), b.state_dict()
diff = [k for k in sa if not torch.equal(sa[k], sb[k])]
nbt = [int(v) for k, v in sa.items() if k.endswith('num_batches_tracked')]
rv = [v for k, v in sa.items() if k.endswith('running_var')]
a.eval()
out = a(torch.zeros(3, 1, 28, 28))
print(json.dumps({"identical": sorted(sa) == sorted(sb) and not diff, "differing": diff, "tensors": len(sa),
                  "buffers": len(list(a.buffers())), "num_batches_tracked": nbt,
                  "running_var_moved": all(not torch.allclose(v, torch.ones_like(v)) for v in rv),
                  "training": a.training, "eval_out": list(out.shape)}))
)PY";

TEST_F(TrainTorchScript, TwoRanksTrainScriptedCnnIdenticallyAndResumeBitExact) {
  std::string metrics = dir_ + "/m.jsonl";
  CliRun full = run("launch -np 2 -- " + std::string(HPCT_BINARY) + " " +
                    train_args(dir_ + "/fm_cnn.pt", "--epochs 2 --log-every 10 --checkpoint-dir " + dir_ +
                                                        "/ckpt --metrics " + metrics + " --save-model " + dir_ +
                                                        "/final-{rank}.pt"));
  ASSERT_EQ(full.exit_code, 0) << full.out;
  ASSERT_TRUE(full.summary.is_object()) << full.out;
  const int steps = 2 * (7500 / 2 / 32);  // 117 full batches per rank and epoch
  EXPECT_EQ(full.summary["steps"], steps) << full.out;
  EXPECT_EQ(full.summary["np"], 2);
  EXPECT_TRUE(full.summary["params_identical_across_ranks"].get<bool>()) << full.out;
  EXPECT_GT(full.summary["val_accuracy"].get<double>(), 0.70) << full.out;

  // Loss falls: the first 10 steps' mean against the last 10's.
  std::vector<double> losses;
  std::ifstream m(metrics);
  std::string line;
  while (std::getline(m, line)) {
    auto j = nlohmann::json::parse(line);
    if (j["type"] == "step") losses.push_back(j["loss"].get<double>());
  }
  ASSERT_GE(losses.size(), 20u);
  std::printf("loss: first 10 steps %.4f, last 10 steps %.4f; validation accuracy %.2f%%\n", losses.front(),
              losses.back(), full.summary["val_accuracy"].get<double>() * 100);
  EXPECT_GT(losses.front(), 1.5);  // untrained: about ln(10) = 2.3
  EXPECT_LT(losses.back(), 0.6 * losses.front());

  // Each rank's own final model (parameters and batch-norm buffers), read
  // back by Python.
  std::ofstream(dir_ + "/compare.py") << kCompare;
  CliRun cmp = shell(python_ + " " + dir_ + "/compare.py " + dir_ + "/final-0.pt " + dir_ + "/final-1.pt");
  ASSERT_EQ(cmp.exit_code, 0) << cmp.out;
  std::printf("python: %s\n", cmp.summary.dump().c_str());
  EXPECT_TRUE(cmp.summary["identical"].get<bool>()) << cmp.out;
  EXPECT_EQ(cmp.summary["buffers"], 6) << cmp.out;
  EXPECT_EQ(cmp.summary["num_batches_tracked"], nlohmann::json::array({steps, steps})) << cmp.out;
  EXPECT_TRUE(cmp.summary["running_var_moved"].get<bool>()) << cmp.out;
  EXPECT_FALSE(cmp.summary["training"].get<bool>()) << cmp.out;
  EXPECT_EQ(cmp.summary["eval_out"], nlohmann::json::array({3, 10})) << cmp.out;

  // The end of epoch 1's checkpoint holds parameters, buffers, optimizer and
  // RNG (dropout) state: epoch 2 again gives the same bits.
  std::string ckpt = dir_ + "/ckpt/ckpt-" + std::string(10 - std::to_string(steps / 2).size(), '0') +
                     std::to_string(steps / 2) + ".pt";
  ASSERT_TRUE(fs::exists(ckpt)) << full.out;
  CliRun resumed = run("launch -np 2 -- " + std::string(HPCT_BINARY) + " " +
                       train_args(dir_ + "/fm_cnn.pt", "--epochs 2 --log-every 50 --resume " + ckpt));
  ASSERT_EQ(resumed.exit_code, 0) << resumed.out;
  EXPECT_EQ(resumed.summary["resumed_from_step"], steps / 2) << resumed.out;
  EXPECT_EQ(resumed.summary["params_crc32c"], full.summary["params_crc32c"]) << resumed.out;
}

// The last line of a failed run's output (the CLI's one-line error).
std::string error_line(const CliRun& r) {
  std::string s = r.out;
  while (!s.empty() && s.back() == '\n') s.pop_back();
  return s.substr(s.rfind('\n') == std::string::npos ? 0 : s.rfind('\n') + 1);
}

TEST_F(TrainTorchScript, BrokenModelsFailWithOneReadableLine) {
  // A Linear(100, 10) cannot take [N, 1, 28, 28]; a ReLU has nothing to
  // train; a state_dict saved with torch.save is not TorchScript.
  CliRun made = shell(python_ + " -c \"import torch; "
                                "torch.jit.script(torch.nn.Linear(100, 10)).save('" + dir_ + "/linear.pt'); "
                                "torch.jit.script(torch.nn.ReLU()).save('" + dir_ + "/relu.pt'); "
                                "torch.save(torch.nn.Linear(2, 2).state_dict(), '" + dir_ + "/state.pt')\"");
  ASSERT_EQ(made.exit_code, 0) << made.out;

  struct Case {
    std::string model, expect;
  };
  for (const Case& c : std::vector<Case>{
           // torch 2.x puts the operator's name between ("...float: addmm: mat1 and ...").
           {dir_ + "/linear.pt", "forward failed on a batch of shape [1, 1, 28, 28] float: "},
           {dir_ + "/linear.pt", "mat1 and mat2 shapes cannot be multiplied (28x28 and 100x10)"},
           {dir_ + "/relu.pt", "has no trainable parameters"},
           {dir_ + "/state.pt", "not a TorchScript archive"},
           {dir_ + "/missing.pt", "neither a built-in model (mlp, cnn, resnet20, mlp50m, mlp200m) nor an existing TorchScript file"},
       }) {
    CliRun r = run(train_args(c.model, "--epochs 1"));
    EXPECT_NE(r.exit_code, 0) << r.out;
    std::string last = error_line(r);
    EXPECT_NE(last.find(c.expect), std::string::npos) << c.model << ": " << r.out;
    EXPECT_EQ(r.out.find("frame #"), std::string::npos) << "a C++ stack in: " << r.out;
    EXPECT_EQ(last.find("internal miniz error"), std::string::npos) << "torch's guesses in: " << last;
    std::printf("%s -> %s\n", fs::path(c.model).filename().c_str(), last.c_str());
  }
}

}  // namespace
