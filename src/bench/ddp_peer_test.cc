#include "bench/ddp_peer.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <chrono>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "core/error.h"

namespace hpct::bench {
namespace {

// What DDP's PowerSGD hook leaves on stderr on the MLP over gloo (torch 1.13):
// the rank's abort, then torch.multiprocessing's report of it.
const char* kGlooAbort =
    "terminate called after throwing an instance of 'gloo::EnforceNotMet'\n"
    "  what():  [enforce fail at ./gloo/transport/tcp/pair.cc:510] op.preamble.length <= op.nbytes. 16424 vs 4096\n"
    "Traceback (most recent call last):\n"
    "  File \"/usr/lib/python3/dist-packages/torch/multiprocessing/spawn.py\", line 140, in join\n"
    "    raise ProcessExitedException(\n"
    "torch.multiprocessing.spawn.ProcessExitedException: process 1 terminated with signal SIGABRT\n";

TEST(DdpPeer, ErrorTextOfAnAbortIsTheExceptionTypeAndWhat) {
  EXPECT_EQ(peer_error_text(kGlooAbort),
            "gloo::EnforceNotMet: [enforce fail at ./gloo/transport/tcp/pair.cc:510] op.preamble.length <= "
            "op.nbytes. 16424 vs 4096");
}

TEST(DdpPeer, ErrorTextOfAPythonExceptionIsItsLastLine) {
  EXPECT_EQ(peer_error_text("Traceback (most recent call last):\n  File \"x.py\", line 3, in <module>\n"
                            "    assert a\nAssertionError: batched tensors\n\nsome noise after\n"),
            "AssertionError: batched tensors");
  EXPECT_EQ(peer_error_text("RuntimeError: Connection closed by peer [10.77.1.2]:123\n"),
            "RuntimeError: Connection closed by peer [10.77.1.2]:123");
  EXPECT_EQ(peer_error_text("just a line\nthe last line\n"), "the last line");
  EXPECT_EQ(peer_error_text(""), "");
  EXPECT_EQ(peer_error_text(std::string(2000, 'x')).size(), 500u);
}

TEST(DdpPeer, ErrorTextOfAHangEndedByTheWatchdogSaysSo) {
  EXPECT_EQ(peer_error_text("Timeout (0:01:00)!\nThread 0x00007f28d66d4040 (most recent call first):\n"
                            "  File \"ddp_peer.py\", line 200 in ddp_rank\n"),
            "a rank made no progress for 60 s and was ended (a hang; its stacks are on stderr)");
}

// Across hosts the rank that aborted may come second in rank order; the
// rank before it only lost its peer. The error names the abort.
TEST(DdpPeer, ErrorOverRanksIsTheRootCrashNotALostPeer) {
  const std::string lost =
      "terminate called after throwing an instance of 'std::runtime_error'\n"
      "  what():  Got the following error when running the callback: RuntimeError: "
      "[./gloo/transport/tcp/pair.cc:589] Read error [10.77.1.2]:10956: Connection reset by peer\n";
  EXPECT_EQ(peer_root_error_text({lost, kGlooAbort}),
            "gloo::EnforceNotMet: [enforce fail at ./gloo/transport/tcp/pair.cc:510] op.preamble.length <= "
            "op.nbytes. 16424 vs 4096");
  EXPECT_NE(peer_root_error_text({lost, ""}).find("Connection reset by peer"), std::string::npos);
  EXPECT_EQ(peer_root_error_text({"", "just a line\n", "AssertionError: x\n"}), "just a line");
  EXPECT_EQ(peer_root_error_text({}), "");
}

TEST(DdpPeer, HookSpecsAreCheckedWithTheChoicesNamed) {
  for (const char* ok : {"none", "fp16", "powersgd:1", "powersgd:4", "powersgd:4:100"}) {
    EXPECT_NO_THROW(check_peer_hook(ok)) << ok;
  }
  for (const char* bad : {"", "fp32", "powersgd", "powersgd:0", "powersgd:x", "powersgd:4:1", "powersgd:4:5:6"}) {
    try {
      check_peer_hook(bad);
      ADD_FAILURE() << bad << " accepted";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
      EXPECT_NE(std::string(e.what()).find("none, fp16 or powersgd:RANK[:START]"), std::string::npos) << e.what();
    }
  }
}

TEST(DdpPeer, SummariesTakeMediansPerRankCountAndHookAndKeepAFailure) {
  std::vector<nlohmann::json> ours, ddp;
  for (double v : {100.0, 300.0, 200.0}) {
    ours.push_back({{"np", 2}, {"samples_per_s", v}, {"compression", "auto"}, {"test_accuracy", v / 1000}});
  }
  for (double v : {50.0, 40.0, 60.0}) {
    ddp.push_back({{"np", 2}, {"model", "cnn"}, {"hook", "fp16"}, {"samples_per_s", v}, {"test_accuracy", 0.5}});
  }
  ddp.push_back({{"np", 2}, {"model", "cnn"}, {"hook", "powersgd:4"}, {"samples_per_s", 80.0}});
  ddp.push_back({{"np", 2}, {"model", "cnn"}, {"hook", "powersgd:4"}, {"failed", true}, {"error", "gloo: boom"}});
  auto s = peer_summaries(ours, ddp);
  ASSERT_EQ(s.size(), 2u);
  EXPECT_EQ(s[0]["hook"], "fp16");
  EXPECT_EQ(s[0]["summary"], "cnn");
  EXPECT_EQ(s[0]["repeats"], 3);
  EXPECT_DOUBLE_EQ(s[0]["hpctrain_samples_per_s"].get<double>(), 200.0);
  EXPECT_DOUBLE_EQ(s[0]["ddp_samples_per_s"].get<double>(), 50.0);
  EXPECT_DOUBLE_EQ(s[0]["ratio"].get<double>(), 4.0);
  EXPECT_DOUBLE_EQ(s[0]["hpctrain_test_accuracy"].get<double>(), 0.2);
  EXPECT_DOUBLE_EQ(s[0]["ddp_test_accuracy"].get<double>(), 0.5);
  EXPECT_EQ(s[0]["hpctrain_compression"], "auto");
  EXPECT_FALSE(s[0]["ddp_failed"].get<bool>());
  EXPECT_EQ(s[1]["hook"], "powersgd:4");
  EXPECT_TRUE(s[1]["ddp_failed"].get<bool>());
  EXPECT_EQ(s[1]["ddp_error"], "gloo: boom");
  EXPECT_FALSE(s[1].contains("ratio"));
  EXPECT_FALSE(s[1].contains("ddp_samples_per_s"));
}

// A peer that cannot start at all (no such script) is a failed line naming
// how it ended, not an exception or a missing line.
TEST(DdpPeer, APeerThatCannotStartIsReportedFailed) {
  DdpPeerOptions o;
  o.script = "/nonexistent/ddp_peer.py";
  o.hook = "fp16";
  o.timeout_s = 60;
  auto d = run_ddp_peer_once(o, 2);
  EXPECT_TRUE(d["failed"].get<bool>()) << d.dump();
  EXPECT_EQ(d["hook"], "fp16");
  EXPECT_EQ(d["np"], 2);
  EXPECT_EQ(d["impl"], "pytorch-ddp");
  EXPECT_NE(d["error"].get<std::string>().find("exit code 2"), std::string::npos) << d.dump();
  EXPECT_FALSE(d.contains("hung")) << d.dump();
}

// A peer that stops making progress: a stand-in script (DDP's hangs are
// rare) that arms the same faulthandler watchdog as bench/ddp_peer.py, with
// its stderr in the run's directory, and then waits. The line says it hung,
// which bench train answers with one more run.
TEST(DdpPeer, APeerEndedByItsWatchdogIsReportedHung) {
  char dir[] = "/tmp/hpct-ddp-hang-XXXXXX";
  ASSERT_NE(::mkdtemp(dir), nullptr);
  const std::string script = std::string(dir) + "/hangs.py";
  std::ofstream(script) << "import faulthandler, os, sys, time\n"
                           "log = open(os.path.join(sys.argv[sys.argv.index('--log-dir') + 1], 'stderr'), 'w')\n"
                           "faulthandler.dump_traceback_later(1, exit=True, file=log)\n"
                           "time.sleep(60)\n";
  DdpPeerOptions o;
  o.script = script;
  o.timeout_s = 30;
  const auto start = std::chrono::steady_clock::now();
  auto d = run_ddp_peer_once(o, 2);
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(20));
  EXPECT_TRUE(d["failed"].get<bool>()) << d.dump();
  EXPECT_TRUE(d.value("hung", false)) << d.dump();
  EXPECT_NE(d["error"].get<std::string>().find("made no progress for 1 s"), std::string::npos) << d.dump();
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace hpct::bench
