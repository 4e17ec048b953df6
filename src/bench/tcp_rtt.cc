#include "bench/tcp_rtt.h"

#include <arpa/inet.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "comm/gloo/socket_table.h"
#include "core/error.h"
#include "net/socket.h"

namespace hpct::bench {
namespace {

// Waits until fd is ready for `events` or the deadline; Timeout naming what.
void wait_fd(int fd, short events, SteadyClock::time_point until, const std::string& what) {
  for (;;) {
    const auto left = std::chrono::duration_cast<Millis>(until - SteadyClock::now()).count();
    if (left <= 0) throw_timeout(what + " timed out");
    pollfd p{fd, events, 0};
    const int r = ::poll(&p, 1, static_cast<int>(std::min<long long>(left, 1000)));
    if (r > 0) return;
    if (r < 0 && errno != EINTR) throw_io("poll (" + what + ")", errno);
  }
}

// One byte each way; false on an orderly close by the peer.
bool transfer(int fd, bool send_first, SteadyClock::time_point until, const std::string& what) {
  char b = 'x';
  for (int step = 0; step < 2; ++step) {
    const bool sending = (step == 0) == send_first;
    for (;;) {
      const ssize_t n = sending ? ::send(fd, &b, 1, MSG_NOSIGNAL) : ::recv(fd, &b, 1, 0);
      if (n == 1) break;
      if (n == 0) return false;
      if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) {
        wait_fd(fd, sending ? POLLOUT : POLLIN, until, what);
        continue;
      }
      throw Error(ErrorCode::kPeerFailure, what + ": " + std::strerror(errno));
    }
  }
  return true;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

}  // namespace

std::string job_network_address() {
  for (const auto& c : comm::established_tcp_connections()) {
    // "[ip]:port"
    const auto close = c.local.find(']');
    if (c.local.size() < 2 || c.local[0] != '[' || close == std::string::npos) continue;
    const std::string ip = c.local.substr(1, close - 1);
    if (ip.rfind("127.", 0) != 0) return ip;
  }
  return "127.0.0.1";
}

std::vector<TcpRoundTrip> measure_tcp_round_trips(comm::Communicator& comm, int pings,
                                                  Millis timeout) {
  const int rank = comm.rank();
  const auto until = SteadyClock::now() + timeout;
  const int warmup = 10;
  UniqueFd listener;
  std::int64_t mine = 0;
  if (rank != 0) {
    const std::string ip = job_network_address();
    int port = 0;
    listener = net::listen_tcp(ip, 0, &port, "bench comm round-trip listener");
    in_addr a{};
    ::inet_pton(AF_INET, ip.c_str(), &a);
    mine = (static_cast<std::int64_t>(ntohl(a.s_addr)) << 16) | port;
  }
  const auto all = comm::allgather_value(comm, mine);
  std::vector<TcpRoundTrip> out;
  if (rank != 0) {
    const std::string what = "TCP round trip with rank 0 (rank " + std::to_string(rank) + ")";
    wait_fd(listener.get(), POLLIN, until, what + ": rank 0 never connected;");
    UniqueFd c(::accept4(listener.get(), nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC));
    if (!c.valid()) throw_io("accept (" + what + ")", errno);
    net::set_nodelay(c.get());
    while (transfer(c.get(), false, until, what)) {
    }
  } else {
    for (int r = 1; r < comm.size(); ++r) {
      const auto v = static_cast<std::uint64_t>(all[static_cast<size_t>(r)]);
      in_addr a{};
      a.s_addr = htonl(static_cast<std::uint32_t>(v >> 16));
      char ip[INET_ADDRSTRLEN];
      ::inet_ntop(AF_INET, &a, ip, sizeof ip);
      const int port = static_cast<int>(v & 0xffff);
      TcpRoundTrip t;
      t.peer_rank = r;
      t.address = std::string(ip) + ":" + std::to_string(port);
      const std::string what = "TCP round trip with rank " + std::to_string(r) + " at " + t.address;
      UniqueFd c = net::connect_tcp(ip, port, until, what);
      std::vector<double> us;
      for (int i = 0; i < warmup + pings; ++i) {
        const auto t0 = SteadyClock::now();
        if (!transfer(c.get(), true, until, what)) {
          throw Error(ErrorCode::kPeerFailure, what + ": the peer closed the connection");
        }
        if (i >= warmup) {
          us.push_back(std::chrono::duration<double, std::micro>(SteadyClock::now() - t0).count());
        }
      }
      t.median_us = median(us);
      t.min_us = us.empty() ? 0 : *std::min_element(us.begin(), us.end());
      out.push_back(t);
    }
  }
  comm::barrier(comm);
  return out;
}

}  // namespace hpct::bench
