#include "launch/output.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>

namespace hpct::launch {
namespace {

std::string read_fd(int fd) {
  std::string s;
  char buf[4096];
  ssize_t n;
  while ((n = ::read(fd, buf, sizeof buf)) > 0) s.append(buf, static_cast<size_t>(n));
  return s;
}

std::string slurp(const std::string& path) {
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

TEST(Output, PrefixesLinesAndWritesRankFiles) {
  int out[2], err[2];
  ASSERT_EQ(::pipe(out), 0);
  ASSERT_EQ(::pipe(err), 0);
  auto dir = std::filesystem::temp_directory_path() / ("hpct-output-test-" + std::to_string(::getpid()));
  {
    OutputMux mux(OutputPrefix::kRank, {"a", "b"}, dir.string(), out[1], err[1], 2);
    mux.rank_line(0, false, "hello");
    mux.rank_line(1, true, "e1");
    mux.rank_line(1, true, "e2");
    mux.rank_line(1, true, "e3");
    mux.spawner_line("h3", true, "ssh: refused");
    mux.launcher_line("done");
    EXPECT_EQ(mux.stderr_tail(1), (std::deque<std::string>{"e2", "e3"}));
    EXPECT_TRUE(mux.stderr_tail(0).empty());
  }
  ::close(out[1]);
  ::close(err[1]);
  EXPECT_EQ(read_fd(out[0]), "[0] hello\n");
  EXPECT_EQ(read_fd(err[0]), "[1] e1\n[1] e2\n[1] e3\n[h3] ssh: refused\nhpctrain launch: done\n");
  EXPECT_EQ(slurp((dir / "rank.0" / "stdout").string()), "hello\n");
  EXPECT_EQ(slurp((dir / "rank.1" / "stderr").string()), "e1\ne2\ne3\n");
  EXPECT_EQ(slurp((dir / "rank.1" / "stdout").string()), "");
  // The launcher's lines with their Unix time, for `hpctrain report`.
  const std::string log = slurp((dir / "launcher.log").string());
  ASSERT_EQ(log.back(), '\n') << log;
  EXPECT_EQ(log.substr(log.find(' ')), " done\n") << log;
  EXPECT_GT(std::stod(log), 1.7e9) << log;
  std::filesystem::remove_all(dir);
  ::close(out[0]);
  ::close(err[0]);
}

TEST(Output, HostAndNoPrefix) {
  int out[2];
  ASSERT_EQ(::pipe(out), 0);
  {
    OutputMux host(OutputPrefix::kHost, {"n1", "n2"}, "", out[1], out[1]);
    host.rank_line(1, false, "x");
    OutputMux none(OutputPrefix::kNone, {"n1"}, "", out[1], out[1]);
    none.rank_line(0, false, "y");
  }
  ::close(out[1]);
  EXPECT_EQ(read_fd(out[0]), "[n2:1] x\ny\n");
  ::close(out[0]);
  EXPECT_THROW(parse_output_prefix("both"), std::exception);
}

}  // namespace
}  // namespace hpct::launch
