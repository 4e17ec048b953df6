// Fault tests of the Gloo backend with real processes: the parent forks N
// ranks that meet through a FileStore in a temporary directory and run a
// stream of large allreduces (Gloo's ring) or of small ones (4 KiB: the
// direct connections, comm/direct_mesh.h); then it SIGKILLs or SIGSTOPs one of them and
// checks that every survivor fails with the right code, names the faulty
// rank, and does so within twice the op timeout instead of hanging.
//
// Each child reports one line on a shared pipe (shorter than PIPE_BUF, so
// lines from several children never interleave):
//   "ready <rank>"                                 after its first allreduce
//   "result <rank> <code> <elapsed ms> <message>"  when an op failed
// and exits with error_exit_code(code). The parent kills only its own
// children, by PID, and reaps every one of them.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "comm/gloo/communicator.h"
#include "core/error.h"
#include "store/file_store.h"

namespace hpct::comm {
namespace {

using namespace std::chrono_literals;

constexpr Millis kOpTimeout = 4000ms;
constexpr size_t kElements = 1u << 20;   // 4 MiB of float32 per allreduce: Gloo's ring
constexpr size_t kSmallElements = 1024;  // 4 KiB: the direct connections

void write_line(int fd, std::string line) {
  if (line.size() > 3000) line.resize(3000);  // stays below PIPE_BUF: one atomic write
  line += "\n";
  ssize_t unused = ::write(fd, line.data(), line.size());
  (void)unused;
}

// The body of one rank; never returns.
// hosts > 0: the ranks play that many hosts (GlooOptions::host_identity),
// so large allreduces go hierarchically.
[[noreturn]] void child_main(int rank, int size, size_t elements, int hosts, const std::string& dir,
                             int report_fd) {
  int exit_code = 1;
  try {
    GlooOptions o;
    o.rank = rank;
    o.size = size;
    o.store = std::make_shared<store::FileStore>(dir);
    o.timeout = kOpTimeout;
    o.logger = Logger(LogLevel::kError, "all", rank, [](const std::string&) {});
    if (hosts > 0) {
      o.hierarchical = true;
      o.host_identity = 1000 + rank / (size / hosts);
    }
    auto comm = GlooCommunicator::connect(o);
    std::vector<float> data(elements, 1.0f);
    AllreduceOptions a;
    a.output = data.data();
    a.count = data.size();
    bool ready = false;
    // The parent ends the stream by killing or stopping a rank; 10 minutes of
    // allreduces is far longer than any test case may take.
    const Deadline give_up(600s);
    while (!give_up.expired()) {
      const auto start = SteadyClock::now();
      try {
        allreduce(*comm, a);
      } catch (const Error& e) {
        const auto ms = std::chrono::duration_cast<Millis>(SteadyClock::now() - start).count();
        write_line(report_fd, "result " + std::to_string(rank) + " " + error_code_name(e.code()) +
                                  " " + std::to_string(ms) + " " + e.what());
        exit_code = error_exit_code(e.code());
        break;
      }
      std::fill(data.begin(), data.end(), 1.0f);
      if (!ready) {
        write_line(report_fd, "ready " + std::to_string(rank));
        ready = true;
      }
    }
    comm.reset();  // the destructor must be bounded even now
  } catch (const std::exception& e) {
    write_line(report_fd, "result " + std::to_string(rank) + " unexpected 0 " + e.what());
  }
  ::_exit(exit_code);
}

struct Result {
  std::string code;
  long elapsed_ms = 0;      // as the child measured its failing op
  long since_fault_ms = 0;  // from the fault to the parent reading the line
  std::string message;
};

class ForkedWorld {
 public:
  explicit ForkedWorld(int size, size_t elements = kElements, int hosts = 0) : size_(size) {
    char tmpl[] = "/tmp/hpct-comm-fault-XXXXXX";
    const char* d = ::mkdtemp(tmpl);
    if (d == nullptr) throw std::runtime_error("mkdtemp failed");
    dir_ = d;
    int fds[2];
    if (::pipe(fds) != 0) throw std::runtime_error("pipe failed");
    read_fd_ = fds[0];
    for (int r = 0; r < size; ++r) {
      const pid_t pid = ::fork();
      if (pid < 0) throw std::runtime_error("fork failed");
      if (pid == 0) {
        ::close(fds[0]);
        child_main(r, size, elements, hosts, dir_, fds[1]);
      }
      pids_.push_back(pid);
    }
    ::close(fds[1]);
  }

  ~ForkedWorld() {
    for (pid_t pid : pids_) {
      if (pid > 0) ::kill(pid, SIGKILL);  // our own children only, by PID
    }
    for (pid_t pid : pids_) {
      if (pid > 0) ::waitpid(pid, nullptr, 0);
    }
    ::close(read_fd_);
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }

  // Reads lines until `done` says stop or the deadline passes.
  template <typename Done>
  void read_lines(Millis budget, Done done) {
    const Deadline deadline(budget);
    while (!done() && !deadline.expired()) {
      pollfd p{read_fd_, POLLIN, 0};
      if (::poll(&p, 1, static_cast<int>(std::min<long long>(deadline.remaining().count(), 200))) <=
          0) {
        continue;
      }
      char buf[4096];
      const ssize_t n = ::read(read_fd_, buf, sizeof(buf));
      if (n <= 0) break;  // every child closed its end
      pending_.append(buf, static_cast<size_t>(n));
      for (size_t nl; (nl = pending_.find('\n')) != std::string::npos;) {
        handle(pending_.substr(0, nl));
        pending_.erase(0, nl + 1);
      }
    }
  }

  void wait_all_ready() {
    read_lines(60s, [&] { return static_cast<int>(ready_.size()) == size_; });
    ASSERT_EQ(static_cast<int>(ready_.size()), size_) << "not every rank started its stream";
  }

  void fault(int rank, int sig) {
    ASSERT_EQ(::kill(pids_[rank], sig), 0);
    fault_at_ = SteadyClock::now();
  }

  // Waits for a result line from every rank but `victim`.
  void wait_results(int victim, Millis budget) {
    read_lines(budget, [&] {
      for (int r = 0; r < size_; ++r) {
        if (r != victim && !results_.count(r)) return false;
      }
      return true;
    });
  }

  // Waits (bounded) for the child to exit; its exit code, or -1.
  int reap(int rank, Millis budget) {
    const Deadline deadline(budget);
    while (!deadline.expired()) {
      int status = 0;
      const pid_t got = ::waitpid(pids_[rank], &status, WNOHANG);
      if (got == pids_[rank]) {
        pids_[rank] = -1;
        return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      }
      ::usleep(10000);
    }
    return -1;
  }

  void kill_and_reap(int rank) {
    if (pids_[rank] <= 0) return;
    ::kill(pids_[rank], SIGKILL);
    ::waitpid(pids_[rank], nullptr, 0);
    pids_[rank] = -1;
  }

  const std::map<int, Result>& results() const { return results_; }

 private:
  void handle(const std::string& line) {
    std::istringstream is(line);
    std::string kind;
    int rank = -1;
    is >> kind >> rank;
    if (kind == "ready") {
      ready_.insert({rank, true});
    } else if (kind == "result") {
      Result r;
      is >> r.code >> r.elapsed_ms;
      std::getline(is, r.message);
      if (!r.message.empty() && r.message[0] == ' ') r.message.erase(0, 1);
      r.since_fault_ms = std::chrono::duration_cast<Millis>(SteadyClock::now() - fault_at_).count();
      results_[rank] = r;
    }
  }

  int size_;
  std::string dir_;
  int read_fd_ = -1;
  std::vector<pid_t> pids_;
  std::string pending_;
  std::map<int, bool> ready_;
  std::map<int, Result> results_;
  SteadyClock::time_point fault_at_;
};

void check_survivors(ForkedWorld& world, int size, int victim, const std::string& want_code) {
  const long bound = 2 * kOpTimeout.count();
  for (int r = 0; r < size; ++r) {
    if (r == victim) continue;
    auto it = world.results().find(r);
    ASSERT_NE(it, world.results().end()) << "rank " << r << " reported nothing: it hangs";
    const Result& res = it->second;
    std::cout << "rank " << r << ": " << res.code << " after " << res.since_fault_ms
              << " ms: " << res.message << "\n";
    EXPECT_EQ(res.code, want_code) << "rank " << r << ": " << res.message;
    EXPECT_NE(res.message.find("peer rank " + std::to_string(victim)), std::string::npos)
        << "rank " << r << " does not name rank " << victim << ": " << res.message;
    EXPECT_NE(res.message.find("on rank " + std::to_string(r)), std::string::npos) << res.message;
    EXPECT_NE(res.message.find("allreduce"), std::string::npos) << res.message;
    EXPECT_LE(res.since_fault_ms, bound) << "rank " << r << " took too long to fail";
    EXPECT_LE(res.elapsed_ms, bound) << "rank " << r << "'s failing op took too long";
  }
}

void expect_exit_codes(ForkedWorld& world, int size, int victim, ErrorCode code) {
  for (int r = 0; r < size; ++r) {
    if (r == victim) continue;
    // The child already reported; only its destructor and _exit are left.
    EXPECT_EQ(world.reap(r, 10s), error_exit_code(code)) << "rank " << r;
  }
}

// SIGKILL of `victim` in a stream of allreduces of `elements` floats: every
// survivor raises PeerFailure naming it, within the bound.
void sigkill_case(int size, int victim, size_t elements, int hosts = 0) {
  ForkedWorld world(size, elements, hosts);
  world.wait_all_ready();
  ::usleep(300 * 1000);  // well inside the stream of allreduces
  world.fault(victim, SIGKILL);
  world.wait_results(victim, 3 * kOpTimeout);
  world.kill_and_reap(victim);
  check_survivors(world, size, victim, "peer-failure");
  expect_exit_codes(world, size, victim, ErrorCode::kPeerFailure);
}

// SIGSTOP of `victim`: every survivor raises Timeout naming it.
void sigstop_case(int size, int victim, size_t elements, int hosts = 0) {
  ForkedWorld world(size, elements, hosts);
  world.wait_all_ready();
  ::usleep(300 * 1000);
  world.fault(victim, SIGSTOP);
  world.wait_results(victim, 3 * kOpTimeout);
  check_survivors(world, size, victim, "timeout");
  expect_exit_codes(world, size, victim, ErrorCode::kTimeout);
  world.kill_and_reap(victim);  // a stopped process still dies on SIGKILL
}

TEST(CommFaultTest, SigkillMidStreamMakesSurvivorsNameTheDeadRank) {
  sigkill_case(4, 1, kElements);
}

TEST(CommFaultTest, SigkillOfRankZeroInWorldOfThree) { sigkill_case(3, 0, kElements); }

TEST(CommFaultTest, SigstopMakesSurvivorsTimeOutNamingTheStoppedRank) {
  sigstop_case(4, 2, kElements);
}

// Small allreduces take the direct connections: the same names and bounds.
TEST(CommFaultTest, SigkillMidSmallStreamMakesSurvivorsNameTheDeadRank) {
  sigkill_case(4, 1, kSmallElements);
}

// 3 ranks: the stopped rank is the one past the power of two, whose partner
// also owes rank 0 the result (the fold).
TEST(CommFaultTest, SigstopMidSmallStreamMakesSurvivorsTimeOutNamingTheStoppedRank) {
  sigstop_case(3, 2, kSmallElements);
}

// 2 hosts x 2 ranks (forked ranks playing hosts): large allreduces go
// hierarchically; a rank killed or stopped on one host is named by the ranks
// of both hosts.
TEST(CommFaultTest, SigkillInTheHierarchicalPathIsNamedOnBothHosts) {
  sigkill_case(4, 3, kElements, 2);
}

TEST(CommFaultTest, SigstopInTheHierarchicalPathIsNamedOnBothHosts) {
  sigstop_case(4, 1, kElements, 2);
}

}  // namespace
}  // namespace hpct::comm
