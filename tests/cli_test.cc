// The hpctrain binary as a user runs it: exit codes, messages, JSON output.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "shell_run.h"

namespace {

struct CliRun {
  int exit_code = -1;
  std::string out;  // stdout and stderr together
};

// Runs a shell command line to its end, stdout and stderr together.
CliRun run_command(const std::string& command) {
  auto s = hpct::test::run_shell("timeout 300 " + command + " 2>&1");
  return {s.exit_code, s.out};
}

CliRun run(const std::string& args) { return run_command(std::string(HPCT_BINARY) + " " + args); }

std::vector<nlohmann::json> json_lines(const std::string& text) {
  std::vector<nlohmann::json> out;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    if (!line.empty() && line[0] == '{') out.push_back(nlohmann::json::parse(line));
  }
  return out;
}

TEST(Cli, ConfigJsonListsEverySettingWithItsSource) {
  CliRun r = run("config --json");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  auto lines = json_lines(r.out);
  ASSERT_GE(lines.size(), 8u);
  bool saw_timeout = false;
  for (const auto& j : lines) {
    if (j["name"] == "HPCT_TIMEOUT_S") saw_timeout = true;
    EXPECT_FALSE(j["doc"].get<std::string>().empty());
  }
  EXPECT_TRUE(saw_timeout);
  CliRun s = run("--set HPCT_TIMEOUT_S=12 config --json");
  for (const auto& j : json_lines(s.out)) {
    if (j["name"] == "HPCT_TIMEOUT_S") {
      EXPECT_EQ(j["value"], "12");
      EXPECT_EQ(j["source"], "flag");
    }
  }
}

TEST(Cli, BadArgumentsExitTwoWithAReadableLine) {
  CliRun r = run("bench comm --sizes 12Q");
  EXPECT_EQ(r.exit_code, 2) << r.out;
  EXPECT_NE(r.out.find("unknown unit"), std::string::npos) << r.out;
  CliRun s = run("--set HPCT_TIMEOUT_S=soon config");
  EXPECT_EQ(s.exit_code, 2) << s.out;
  EXPECT_NE(s.out.find("HPCT_TIMEOUT_S=soon"), std::string::npos) << s.out;
  CliRun t = run("no-such-command");
  EXPECT_EQ(t.exit_code, 2) << t.out;
}

TEST(Cli, GlooRankWithoutStoreSaysHowToFixIt) {
  CliRun s = run("bench comm --worker --sizes 4K --iters 1");
  // Started by hand as one rank of two, with no store to meet the other.
  std::string cmd = std::string("HPCT_RANK=0 HPCT_SIZE=2 HPCT_BACKEND=gloo timeout 60 ") +
                    HPCT_BINARY + " bench comm --worker --sizes 4K --iters 1 2>&1";
  auto alone = hpct::test::run_shell(cmd);
  EXPECT_EQ(alone.exit_code, 2) << alone.out;
  EXPECT_NE(alone.out.find("HPCT_STORE_DIR"), std::string::npos) << alone.out;
  EXPECT_EQ(s.exit_code, 0) << s.out;  // a single rank needs no store
}

// The "Subcommands:" lines of a --help text, spaces collapsed.
std::vector<std::string> subcommand_lines(const std::string& help) {
  std::vector<std::string> out;
  std::istringstream in(help);
  std::string line;
  bool in_list = false;
  while (std::getline(in, line)) {
    if (line.rfind("Subcommands:", 0) == 0) { in_list = true; continue; }
    if (!in_list) continue;
    if (line.empty()) break;
    std::istringstream words(line);
    std::string w, joined;
    while (words >> w) joined += (joined.empty() ? "" : " ") + w;
    out.push_back(joined);
  }
  return out;
}

std::string torch_binary() {
  std::string self = HPCT_BINARY;
  return self.substr(0, self.rfind('/') + 1) + "hpctrain-torch";
}

// hpctrain does not load libtorch: train and the torch benchmarks run in
// hpctrain-torch, which hpctrain execs with the same argv.
TEST(Cli, TorchSubcommandsRunThroughTheSiblingAsBefore) {
  CliRun help = run("--help");
  ASSERT_EQ(help.exit_code, 0) << help.out;
  for (const char* sub : {"config", "bench", "data", "launch", "doctor", "train"}) {
    EXPECT_NE(help.out.find(std::string("\n  ") + sub + " "), std::string::npos) << sub << help.out;
  }
  // The forwarding subcommands' descriptions are the real subcommands'.
  CliRun bench = run("bench --help");
  for (const auto& [front, torch] : {std::pair{help.out, std::string(" --help")},
                                     std::pair{bench.out, std::string(" bench --help")}}) {
    CliRun t = run_command(torch_binary() + torch);
    auto listed = subcommand_lines(t.out);
    ASSERT_FALSE(listed.empty()) << t.out;
    auto ours = subcommand_lines(front);
    for (const auto& line : listed) {
      EXPECT_NE(std::find(ours.begin(), ours.end(), line), ours.end()) << line << "\n" << front;
    }
  }

  CliRun train = run("train --help");
  EXPECT_EQ(train.exit_code, 0) << train.out;
  EXPECT_NE(train.out.find("--model"), std::string::npos) << train.out;
  // --set and -v reach it, and the configuration is printed once, by hpctrain-torch.
  CliRun engine = run("--set HPCT_TIMEOUT_S=12 -v bench engine --np 0");
  EXPECT_EQ(engine.exit_code, 2) << engine.out;
  auto first = engine.out.find("HPCT_TIMEOUT_S ");
  ASSERT_NE(first, std::string::npos) << engine.out;
  EXPECT_NE(engine.out.find("12", first), std::string::npos) << engine.out;
  EXPECT_EQ(engine.out.find("HPCT_TIMEOUT_S ", first + 1), std::string::npos) << engine.out;
  EXPECT_NE(engine.out.find("--np must be at least 1"), std::string::npos) << engine.out;
  EXPECT_EQ(run("bench engine --no-such-flag").exit_code, 2);
  EXPECT_EQ(run("-v train --no-such-flag").exit_code, 2);
}

TEST(Cli, MissingTorchSiblingNamesThePathAndTheFix) {
  std::string dir = "/tmp/hpct-cli-alone-" + std::to_string(::getpid());
  std::string copy = dir + "/hpctrain";
  ASSERT_EQ(std::system(("mkdir -p " + dir + " && cp " + std::string(HPCT_BINARY) + " " + copy).c_str()), 0);
  CliRun r = run_command(copy + " train --help");
  EXPECT_EQ(r.exit_code, 5) << r.out;  // Io
  EXPECT_NE(r.out.find(dir + "/hpctrain-torch"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("--target hpctrain-torch"), std::string::npos) << r.out;
  EXPECT_EQ(run_command(copy + " config --json").exit_code, 0);  // the rest does not need it
  std::system(("rm -rf " + dir).c_str());
}

// Both backends end to end: mpirun starts 2 ranks; MPI ranks meet through
// MPI, Gloo ranks through a file store; rank 0 prints one line per size.
TEST(Cli, BenchCommPrintsOneJsonLinePerBackendAndSize) {
  CliRun r = run("bench comm --backend all --np 2 --sizes 4K,64K --iters 3");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  auto lines = json_lines(r.out);
  ASSERT_EQ(lines.size(), 4u) << r.out;
  for (const auto& j : lines) {
    EXPECT_EQ(j["bench"], "comm");
    EXPECT_EQ(j["op"], "allreduce");
    EXPECT_EQ(j["np"], 2);
    EXPECT_EQ(j["iters"], 3);
    EXPECT_GT(j["time_us"].get<double>(), 0);
    EXPECT_GT(j["raw_time_us"].get<double>(), 0);
    EXPECT_GT(j["busbw_GBps"].get<double>(), 0);
    EXPECT_EQ(j["raw_call"], j["backend"] == "mpi" ? "MPI_Allreduce" : "gloo::allreduce");
    // Each call starts from an input the rank has just written, and the
    // sums are checked (a wrong one fails the run).
    EXPECT_EQ(j["input"], "fresh");
  }
  EXPECT_EQ(lines[0]["backend"], "mpi");
  EXPECT_EQ(lines[2]["backend"], "gloo");
  EXPECT_EQ(lines[3]["bytes"], 65536);

  CliRun reused = run("bench comm --backend mpi --np 2 --sizes 4K --iters 3 --input reused");
  ASSERT_EQ(reused.exit_code, 0) << reused.out;
  auto reused_lines = json_lines(reused.out);
  ASSERT_EQ(reused_lines.size(), 1u) << reused.out;
  EXPECT_EQ(reused_lines[0]["input"], "reused");
  CliRun bad = run("bench comm --input stale");
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_NE(bad.out.find("--input"), std::string::npos) << bad.out;
}

// bench comm --check marks each shared-memory allreduce of 1 MiB and up
// against the raw MPI call and fails, naming the size, past the bound. How
// fast it is belongs to the benchmark; the test checks the marking with a
// bound every run meets and one none can.
TEST(Cli, BenchCommCheckMarksSharedMemoryAgainstTheRawMpiCall) {
  const std::string cmd = "bench comm --backend mpi --np 2 --sizes 64K,1M,4M --budget-s 0.3 --check";
  CliRun r = run(cmd + " --check-ratio 1000");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  auto lines = json_lines(r.out);
  ASSERT_EQ(lines.size(), 3u) << r.out;
  EXPECT_FALSE(lines[0].contains("check")) << "64 KiB is below the checked sizes: " << r.out;
  for (size_t i = 1; i < 3; ++i) {
    EXPECT_EQ(lines[i]["check"], "ok") << r.out;
    EXPECT_GT(lines[i]["overhead_ratio"].get<double>(), 0.0) << r.out;
  }

  CliRun tight = run(cmd + " --check-ratio 0.001");
  EXPECT_NE(tight.exit_code, 0) << tight.out;
  EXPECT_NE(tight.out.find("bench comm --check failed: the shared-memory allreduce of 1048576 bytes took"),
            std::string::npos) << tight.out;
  for (const auto& j : json_lines(tight.out)) {
    if (j["bytes"] >= 1048576) {
      EXPECT_EQ(j["check"], "slower than MPI_Allreduce") << tight.out;
    }
  }
  EXPECT_EQ(run("bench comm --check-ratio 0").exit_code, 2);
}

}  // namespace
