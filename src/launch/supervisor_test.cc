// The supervisor against stand-in wrappers: small shell scripts that speak
// the record protocol (rank_protocol.h), so every failure path is exercised
// without ssh or the hpctrain binary.
#include "launch/supervisor.h"

#include <gtest/gtest.h>
#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include "core/error.h"

namespace hpct::launch {
namespace {

struct Harness {
  int out[2];
  int err[2];
  std::unique_ptr<OutputMux> mux;
  explicit Harness(std::vector<std::string> hosts) {
    // As the launcher does (launcher.cc): a rank's spawner that exits before
    // reading its spec must give EPIPE on the write, not kill this process.
    ::signal(SIGPIPE, SIG_IGN);
    EXPECT_EQ(::pipe2(out, O_NONBLOCK), 0);
    EXPECT_EQ(::pipe2(err, O_NONBLOCK), 0);
    mux = std::make_unique<OutputMux>(OutputPrefix::kRank, std::move(hosts), "", out[1], err[1]);
  }
  ~Harness() {
    for (int fd : {out[0], out[1], err[0], err[1]}) ::close(fd);
  }
  std::string read(int fd) {
    std::string s;
    char buf[4096];
    ssize_t n;
    while ((n = ::read(fd, buf, sizeof buf)) > 0) s.append(buf, static_cast<size_t>(n));
    return s;
  }
};

ProcessPlan script(int rank, const std::string& host, const std::string& body) {
  ProcessPlan p;
  p.argv = {"sh", "-c", body};
  p.host = host;
  p.via = "local";
  p.ranks = {rank};
  return p;
}

// A well-behaved wrapper: reads the spec, starts, then runs `then`.
std::string wrapper(int rank, const std::string& then) {
  std::string r = std::to_string(rank);
  return "read -r spec; echo '@hpct@ " + r + " S 1 h'; " + then;
}
// Waits for the launcher to close stdin, as the real wrapper does.
std::string until_stopped(int rank) {
  return "while read -r x; do :; done; echo '@hpct@ " + std::to_string(rank) + " X signal 15'; exit 143";
}

RankSpec spec(int size) {
  RankSpec s;
  s.size = size;
  s.argv = {"prog"};
  return s;
}

SupervisorOptions fast() {
  SupervisorOptions o;
  o.start_timeout = Millis(5000);
  o.grace = Millis(200);
  return o;
}

TEST(Supervisor, SuccessRelaysEveryLine) {
  Harness h({"a", "b"});
  std::vector<ProcessPlan> plans = {
      script(0, "a", wrapper(0, "echo '@hpct@ 0 O hello'; echo '@hpct@ 0 X exit 0'")),
      script(1, "b", wrapper(1, "echo '@hpct@ 1 E warn'; echo '@hpct@ 1 X exit 0'"))};
  Supervisor s(plans, spec(2), *h.mux, fast(), Logger());
  AttemptResult r = s.run(0);
  EXPECT_TRUE(r.ok) << r.summary;
  EXPECT_EQ(h.read(h.out[0]), "[0] hello\n");
  EXPECT_EQ(h.read(h.err[0]), "[1] warn\n");
}

TEST(Supervisor, FailingRankStopsTheOthersAndIsNamed) {
  Harness h({"a", "b"});
  std::vector<ProcessPlan> plans = {
      script(0, "a", wrapper(0, until_stopped(0))),
      script(1, "b", wrapper(1, "echo '@hpct@ 1 E boom'; echo '@hpct@ 1 X exit 3'; exit 3"))};
  Supervisor s(plans, spec(2), *h.mux, fast(), Logger());
  Deadline d(Millis(10000));
  AttemptResult r = s.run(0);
  EXPECT_FALSE(r.ok);
  EXPECT_EQ(r.exit_code, 3);
  EXPECT_EQ(r.failed_rank, 1);
  EXPECT_EQ(r.summary, "rank 1 on host b exited with code 3");
  EXPECT_EQ(r.tail, std::vector<std::string>{"boom"});
  EXPECT_LT(r.stop_time.count(), 2000);
  EXPECT_LT(d.elapsed().count(), 3000);
}

TEST(Supervisor, SignalIsReportedAsSignal) {
  Harness h({"a"});
  Supervisor s({script(0, "a", wrapper(0, "echo '@hpct@ 0 X signal 9'; exit 137"))}, spec(1), *h.mux,
               fast(), Logger());
  AttemptResult r = s.run(0);
  EXPECT_EQ(r.exit_code, 137);
  EXPECT_NE(r.summary.find("killed by signal 9"), std::string::npos) << r.summary;
}

TEST(Supervisor, SpawnerThatDiesBeforeTheRankStartsIsNamedWithItsMessage) {
  Harness h({"a", "b"});
  ProcessPlan dead = script(1, "b", "echo 'ssh: connect to host b port 22: Connection refused' >&2; exit 255");
  dead.via = "ssh";
  Supervisor s({script(0, "a", wrapper(0, until_stopped(0))), dead}, spec(2), *h.mux, fast(), Logger());
  AttemptResult r = s.run(0);
  EXPECT_FALSE(r.ok);
  EXPECT_EQ(r.exit_code, error_exit_code(ErrorCode::kPeerFailure));
  EXPECT_EQ(r.summary, "rank 1 on host b did not start: its ssh session exited with code 255");
  ASSERT_EQ(r.tail.size(), 1u);
  EXPECT_NE(r.tail[0].find("Connection refused"), std::string::npos);
  EXPECT_NE(h.read(h.err[0]).find("[b] ssh: connect to host b"), std::string::npos);
}

TEST(Supervisor, RankThatNeverStartsTimesOut) {
  Harness h({"a", "b"});
  SupervisorOptions o = fast();
  o.start_timeout = Millis(300);
  Supervisor s({script(0, "a", wrapper(0, until_stopped(0))),
                script(1, "b", "read -r spec; while read -r x; do :; done; exit 1")},
               spec(2), *h.mux, o, Logger());
  AttemptResult r = s.run(0);
  EXPECT_EQ(r.exit_code, 124);
  EXPECT_NE(r.summary.find("rank 1 on host b did not start within the start timeout"), std::string::npos)
      << r.summary;
}

TEST(Supervisor, WrapperIgnoringStopIsKilledAfterGrace) {
  Harness h({"a", "b"});
  Supervisor s({script(0, "a", "trap '' TERM; read -r spec; echo '@hpct@ 0 S 1 h'; exec sleep 30"),
                script(1, "b", wrapper(1, "echo '@hpct@ 1 X exit 5'; exit 5"))},
               spec(2), *h.mux, fast(), Logger());
  Deadline d(Millis(10000));
  AttemptResult r = s.run(0);
  EXPECT_EQ(r.exit_code, 5);
  EXPECT_LT(d.elapsed().count(), 5000);  // grace 0.2 s + 2 s, then SIGKILL
}

TEST(Supervisor, MissingSpawnerProgramIsAnIoError) {
  Harness h({"a"});
  ProcessPlan p;
  p.argv = {"/nonexistent/ssh"};
  p.host = "a";
  p.ranks = {0};
  Supervisor s({p}, spec(1), *h.mux, fast(), Logger());
  try {
    s.run(0);
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kIo);
    EXPECT_NE(std::string(e.what()).find("rank 0 on host a"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace hpct::launch
