// Bounded parallel scrapes against real sockets: a rank's endpoint
// (RankMetrics), a port nobody listens on, and a listener that accepts
// but never answers, as a stopped (SIGSTOP) rank's endpoint does.
#include "metrics/scrape.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include "core/fd.h"
#include "metrics/exposition.h"
#include "metrics/rank_metrics.h"

namespace hpct::metrics {
namespace {

// A listening socket on loopback that nobody accepts from: the kernel
// completes connections, no byte ever comes back.
UniqueFd silent_listener(int* port) {
  UniqueFd fd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  EXPECT_EQ(::bind(fd.get(), reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  EXPECT_EQ(::listen(fd.get(), 8), 0);
  socklen_t len = sizeof a;
  ::getsockname(fd.get(), reinterpret_cast<sockaddr*>(&a), &len);
  *port = ntohs(a.sin_port);
  return fd;
}

int closed_port() {
  int port = 0;
  silent_listener(&port);  // closed again at once
  return port;
}

TEST(Scrape, AnswersRefusalsAndSilenceEachWithinTheBoundInParallel) {
  RankMetricsOptions o;
  o.rank = 3;
  o.host = "h3";
  o.launch_id = "j-9";
  RankMetrics rank(o);
  rank.record_step(32, 0.001, 0.01, 0.002, 0.001);
  int silent_port = 0;
  UniqueFd silent = silent_listener(&silent_port);
  int silent_port1 = 0;  // a second silent one: the waits overlap
  UniqueFd silent1 = silent_listener(&silent_port1);
  const std::vector<std::string> targets = {
      "127.0.0.1:" + std::to_string(rank.port()), "127.0.0.1:" + std::to_string(closed_port()),
      "127.0.0.1:" + std::to_string(silent_port), "127.0.0.1:" + std::to_string(silent_port1)};
  const auto t0 = std::chrono::steady_clock::now();
  auto r = scrape_targets(targets, std::chrono::milliseconds(800));
  const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  ASSERT_EQ(r.size(), 4u);
  EXPECT_TRUE(r[0].ok) << r[0].error;
  Exposition e(parse_exposition(r[0].body));
  EXPECT_EQ(e.value("hpctrain_samples_total", {{"rank", "3"}, {"host", "h3"}, {"launch_id", "j-9"}}), 32);
  EXPECT_FALSE(r[1].ok);
  EXPECT_FALSE(r[1].timed_out);
  EXPECT_NE(r[1].error.find("Connection refused"), std::string::npos) << r[1].error;
  for (int i : {2, 3}) {
    EXPECT_FALSE(r[i].ok);
    EXPECT_TRUE(r[i].timed_out);
    EXPECT_EQ(r[i].error, "no answer within 0.8 s");
    EXPECT_TRUE(r[i].body.empty());
  }
  // Two silent endpoints cost one bound, not two.
  EXPECT_GE(took, 0.75);
  EXPECT_LT(took, 1.5);
}

}  // namespace
}  // namespace hpct::metrics
