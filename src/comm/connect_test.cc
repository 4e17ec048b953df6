// connect_world in a Kubernetes Indexed Job: ranks from JOB_COMPLETION_INDEX,
// rank 0 serving the job's authenticated store at HPCT_STORE_ADDR (there is no
// launcher process), the others connecting to it even when they start first;
// then a real Gloo allreduce over the world they made. Ranks are threads.
#include "comm/connect.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "core/error.h"

namespace hpct::comm {
namespace {

int free_port() {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  EXPECT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  EXPECT_EQ(::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len), 0);
  ::close(fd);
  return ntohs(a.sin_port);
}

// The secret on a pipe's read end, as `3< /etc/hpctrain/secret` gives it.
int secret_fd(const std::string& secret) {
  int p[2];
  EXPECT_EQ(::pipe(p), 0);
  EXPECT_EQ(::write(p[1], secret.data(), secret.size()), static_cast<ssize_t>(secret.size()));
  ::close(p[1]);
  return p[0];
}

MapEnv pod_env(int index, int size, const std::string& addr, int fd) {
  return MapEnv({{"JOB_COMPLETION_INDEX", std::to_string(index)},
                 {"HPCT_SIZE", std::to_string(size)},
                 {"HPCT_STORE_ADDR", addr},
                 {"HPCT_SECRET_FD", std::to_string(fd)},
                 {"HPCT_BACKEND", "gloo"},
                 {"HPCT_TIMEOUT_S", "30"},
                 {"HPCT_JOB_ID", "indexed"}});
}

TEST(ConnectKubernetes, RankZeroServesTheStoreAndTheRanksAllreduce) {
  const int size = 3;
  const std::string addr = "127.0.0.1:" + std::to_string(free_port());
  const std::string secret(64, 'k');
  std::vector<float> sums(size, -1);
  std::vector<std::string> errors(size);
  std::vector<bool> served(size, false);
  std::vector<std::thread> pods;
  // Rank 0 starts last: the others must wait for its store, not fail.
  for (int r = size - 1; r >= 0; --r) {
    pods.emplace_back([&, r] {
      try {
        MapEnv env = pod_env(r, size, addr, secret_fd(secret));
        World w = connect_world(Config::from_env(env), env, Logger());
        served[r] = w.store_server != nullptr;
        float v = static_cast<float>(w.info.rank + 1);
        AllreduceOptions o;
        o.input = &v;
        o.output = &v;
        o.count = 1;
        allreduce(*w.comm, o);
        sums[r] = v;
        barrier(*w.comm);  // rank 0's store outlives every rank's use of it
      } catch (const std::exception& e) {
        errors[r] = e.what();
      }
    });
    if (r == size - 1) std::this_thread::sleep_for(std::chrono::milliseconds(300));
  }
  for (auto& t : pods) t.join();
  for (int r = 0; r < size; ++r) {
    EXPECT_EQ(errors[r], "") << "rank " << r;
    EXPECT_EQ(sums[r], 6.0f) << "rank " << r;
    EXPECT_EQ(served[r], r == 0) << "rank " << r;
  }
}

TEST(ConnectKubernetes, AWrongSecretIsRefused) {
  const std::string addr = "127.0.0.1:" + std::to_string(free_port());
  std::string error0, error1;
  std::thread rank0([&] {
    try {
      MapEnv env = pod_env(0, 2, addr, secret_fd(std::string(64, 'a')));
      env.set("HPCT_TIMEOUT_S", "3");
      connect_world(Config::from_env(env), env, Logger());
    } catch (const std::exception& e) {
      error0 = e.what();
    }
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  try {
    MapEnv env = pod_env(1, 2, addr, secret_fd(std::string(64, 'b')));
    env.set("HPCT_TIMEOUT_S", "3");
    connect_world(Config::from_env(env), env, Logger());
  } catch (const std::exception& e) {
    error1 = e.what();
  }
  rank0.join();
  EXPECT_NE(error1.find("secret"), std::string::npos) << error1;
  EXPECT_NE(error0, "");  // rank 0 alone times out waiting for rank 1
}

TEST(ConnectKubernetes, RankZeroWaitsBoundedlyForItsOwnName) {
  MapEnv env = pod_env(0, 2, "no-such-pod.invalid:29400", secret_fd(std::string(64, 'k')));
  env.set("HPCT_TIMEOUT_S", "1");
  auto start = std::chrono::steady_clock::now();
  try {
    connect_world(Config::from_env(env), env, Logger());
    FAIL() << "rank 0 served a store at a name that does not resolve";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kTimeout) << e.what();
    EXPECT_NE(std::string(e.what()).find("no-such-pod.invalid"), std::string::npos) << e.what();
  }
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(10));
}

}  // namespace
}  // namespace hpct::comm
