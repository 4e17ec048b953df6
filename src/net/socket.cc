#include "net/socket.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <memory>

#include "core/error.h"

namespace hpct::net {
namespace {

struct AddrInfoDeleter {
  void operator()(addrinfo* ai) const { ::freeaddrinfo(ai); }
};
using AddrInfoPtr = std::unique_ptr<addrinfo, AddrInfoDeleter>;

// Numeric or named host; the error says which host:port failed and why.
AddrInfoPtr resolve(const std::string& host, int port, bool passive, ErrorCode code) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = passive ? AI_PASSIVE : 0;
  addrinfo* res = nullptr;
  int rc = ::getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &res);
  if (rc != 0) {
    throw Error(code,
                "cannot resolve " + host + ":" + std::to_string(port) + ": " + ::gai_strerror(rc));
  }
  return AddrInfoPtr(res);
}

// Waits for events on fd; see read_exact for the errors.
void wait_ready(int fd, short events, SteadyClock::time_point until, int wake_fd,
                const std::string& what, const char* doing) {
  while (true) {
    auto now = SteadyClock::now();
    if (now >= until) throw_timeout("timed out " + std::string(doing) + " " + what);
    // Whole-second slices keep the arithmetic away from time_point::max().
    auto left = std::chrono::duration_cast<Millis>(until - now).count() + 1;
    int timeout_ms = static_cast<int>(std::min<long long>(left, 1000));
    pollfd fds[2] = {{fd, events, 0}, {wake_fd, POLLIN, 0}};
    int ready = ::poll(fds, wake_fd >= 0 ? 2 : 1, timeout_ms);
    if (ready < 0) {
      if (errno == EINTR) continue;
      throw_io("poll " + what, errno);
    }
    if (wake_fd >= 0 && fds[1].revents != 0) throw Woken{};
    if (fds[0].revents != 0) return;
  }
}

}  // namespace

UniqueFd listen_tcp(const std::string& address, int port, int* bound_port,
                    const std::string& who) {
  const std::string where = address + ":" + std::to_string(port);
  if (address.empty()) throw_invalid_argument(who + ": no bind address given");
  AddrInfoPtr addrs = resolve(address, port, true, ErrorCode::kInvalidArgument);
  int last_errno = 0;
  for (addrinfo* ai = addrs.get(); ai; ai = ai->ai_next) {
    UniqueFd fd(
        ::socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, ai->ai_protocol));
    if (!fd.valid()) {
      last_errno = errno;
      continue;
    }
    int one = 1;
    ::setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (::bind(fd.get(), ai->ai_addr, ai->ai_addrlen) != 0 || ::listen(fd.get(), 128) != 0) {
      last_errno = errno;
      continue;
    }
    sockaddr_storage bound{};
    socklen_t len = sizeof bound;
    if (::getsockname(fd.get(), reinterpret_cast<sockaddr*>(&bound), &len) != 0) {
      throw_io(who + ": getsockname " + where, errno);
    }
    *bound_port = bound.ss_family == AF_INET6
                      ? ntohs(reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port)
                      : ntohs(reinterpret_cast<sockaddr_in*>(&bound)->sin_port);
    return fd;
  }
  throw_io(who + ": bind " + where, last_errno);
}

UniqueFd connect_tcp(const std::string& host, int port, SteadyClock::time_point until,
                     const std::string& what) {
  AddrInfoPtr addrs = resolve(host, port, false, ErrorCode::kPeerFailure);
  std::string last_error = "no address";
  for (addrinfo* ai = addrs.get(); ai; ai = ai->ai_next) {
    UniqueFd fd(
        ::socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, ai->ai_protocol));
    if (!fd.valid()) throw_io("socket for " + what, errno);
    if (::connect(fd.get(), ai->ai_addr, ai->ai_addrlen) != 0) {
      if (errno != EINPROGRESS) {
        last_error = std::strerror(errno);
        continue;
      }
      // Connected (or refused) when writable; poll in slices up to until.
      while (true) {
        const auto left = std::chrono::duration_cast<Millis>(until - SteadyClock::now()).count();
        if (left <= 0) throw_timeout("timed out connecting to " + what);
        pollfd p{fd.get(), POLLOUT, 0};
        int ready = ::poll(&p, 1, static_cast<int>(std::min<long long>(left, 1000)));
        if (ready > 0) break;
        if (ready < 0 && errno != EINTR) throw_io("poll connecting to " + what, errno);
      }
      int err = 0;
      socklen_t len = sizeof err;
      ::getsockopt(fd.get(), SOL_SOCKET, SO_ERROR, &err, &len);
      if (err != 0) {
        last_error = std::strerror(err);
        continue;
      }
    }
    set_nodelay(fd.get());
    return fd;
  }
  throw_peer_failure("cannot connect to " + what + ": " + last_error);
}

void set_nodelay(int fd) {
  int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

std::string address_of(const sockaddr* sa) {
  char host[INET6_ADDRSTRLEN] = "?";
  if (sa->sa_family == AF_INET) {
    auto* in = reinterpret_cast<const sockaddr_in*>(sa);
    ::inet_ntop(AF_INET, &in->sin_addr, host, sizeof host);
    return std::string(host) + ":" + std::to_string(ntohs(in->sin_port));
  }
  if (sa->sa_family == AF_INET6) {
    auto* in6 = reinterpret_cast<const sockaddr_in6*>(sa);
    ::inet_ntop(AF_INET6, &in6->sin6_addr, host, sizeof host);
    return "[" + std::string(host) + "]:" + std::to_string(ntohs(in6->sin6_port));
  }
  return "?";
}

std::string peer_address(int fd) {
  sockaddr_storage ss{};
  socklen_t len = sizeof ss;
  if (::getpeername(fd, reinterpret_cast<sockaddr*>(&ss), &len) != 0) return "?";
  return address_of(reinterpret_cast<const sockaddr*>(&ss));
}

void read_exact(int fd, void* buf, size_t n, SteadyClock::time_point until, int wake_fd,
                const std::string& what) {
  char* p = static_cast<char*>(buf);
  size_t off = 0;
  while (off < n) {
    ssize_t got = ::recv(fd, p + off, n - off, MSG_DONTWAIT);
    if (got > 0) {
      off += static_cast<size_t>(got);
    } else if (got == 0) {
      throw_peer_failure(what + " closed the connection");
    } else if (errno == EAGAIN || errno == EWOULDBLOCK) {
      wait_ready(fd, POLLIN, until, wake_fd, what, "reading from");
    } else if (errno == ECONNRESET || errno == EPIPE) {
      throw_peer_failure(what + " reset the connection");
    } else if (errno != EINTR) {
      throw_io("recv from " + what, errno);
    }
  }
}

void write_all(int fd, const void* buf, size_t n, SteadyClock::time_point until, int wake_fd,
               const std::string& what) {
  const char* p = static_cast<const char*>(buf);
  bool socket = true;
  size_t off = 0;
  while (off < n) {
    ssize_t put = socket ? ::send(fd, p + off, n - off, MSG_DONTWAIT | MSG_NOSIGNAL)
                         : ::write(fd, p + off, n - off);
    if (put >= 0) {
      off += static_cast<size_t>(put);
    } else if (errno == ENOTSOCK && socket) {
      socket = false;  // a pipe or a file
    } else if (errno == EAGAIN || errno == EWOULDBLOCK) {
      wait_ready(fd, POLLOUT, until, wake_fd, what, "writing to");
    } else if (errno == ECONNRESET || errno == EPIPE) {
      throw_peer_failure(what + " closed the connection");
    } else if (errno != EINTR) {
      throw_io((socket ? "send to " : "write ") + what, errno);
    }
  }
}

bool try_write_all(int fd, const void* buf, size_t n, SteadyClock::time_point until) {
  try {
    write_all(fd, buf, n, until, -1, "fd " + std::to_string(fd));
    return true;
  } catch (const Error&) {
    return false;
  }
}

bool try_write_all(int fd, std::string_view data, SteadyClock::time_point until) {
  return try_write_all(fd, data.data(), data.size(), until);
}

void wait_readable(int fd, SteadyClock::time_point until, int wake_fd, const std::string& what) {
  wait_ready(fd, POLLIN, until, wake_fd, what, "waiting for a message from");
}

void wait_writable(int fd, SteadyClock::time_point until, int wake_fd, const std::string& what) {
  wait_ready(fd, POLLOUT, until, wake_fd, what, "writing to");
}

}  // namespace hpct::net
