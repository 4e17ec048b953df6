// The hpctrain binary as a user runs it: exit codes, messages, JSON output.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdio>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

namespace {

struct CliRun {
  int exit_code = -1;
  std::string out;  // stdout and stderr together
};

CliRun run(const std::string& args) {
  std::string cmd = std::string("timeout 300 ") + HPCT_BINARY + " " + args + " 2>&1";
  CliRun r;
  FILE* p = popen(cmd.c_str(), "r");
  if (p == nullptr) return r;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) r.out.append(buf, n);
  int status = pclose(p);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return r;
}

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
  FILE* p = popen(cmd.c_str(), "r");
  ASSERT_NE(p, nullptr);
  std::string out;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  int status = pclose(p);
  EXPECT_EQ(WEXITSTATUS(status), 2) << out;
  EXPECT_NE(out.find("HPCT_STORE_DIR"), std::string::npos) << out;
  EXPECT_EQ(s.exit_code, 0) << s.out;  // a single rank needs no store
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
  }
  EXPECT_EQ(lines[0]["backend"], "mpi");
  EXPECT_EQ(lines[2]["backend"], "gloo");
  EXPECT_EQ(lines[3]["bytes"], 65536);
}

}  // namespace
