#include "doctor/net.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "core/error.h"

namespace hpct::doctor {
namespace {

bool to_sockaddr(const Endpoint& e, sockaddr_in* out) {
  std::memset(out, 0, sizeof *out);
  out->sin_family = AF_INET;
  out->sin_port = htons(static_cast<uint16_t>(e.port));
  return ::inet_pton(AF_INET, e.addr.c_str(), &out->sin_addr) == 1;
}

void set_timeouts(int fd, Millis timeout) {
  timeval tv{};
  tv.tv_sec = timeout.count() / 1000;
  tv.tv_usec = (timeout.count() % 1000) * 1000;
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
}

}  // namespace

std::vector<std::string> resolve_ipv4(const std::string& name, std::string* error) {
  std::vector<std::string> out;
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  int rc = ::getaddrinfo(name.c_str(), nullptr, &hints, &res);
  if (rc != 0) {
    if (error) *error = ::gai_strerror(rc);
    return out;
  }
  for (addrinfo* a = res; a != nullptr; a = a->ai_next) {
    char text[INET_ADDRSTRLEN];
    auto* sin = reinterpret_cast<sockaddr_in*>(a->ai_addr);
    if (inet_ntop(AF_INET, &sin->sin_addr, text, sizeof text) &&
        std::find(out.begin(), out.end(), text) == out.end()) {
      out.push_back(text);
    }
  }
  ::freeaddrinfo(res);
  if (out.empty() && error) *error = "no IPv4 address";
  return out;
}

bool is_loopback_address(const std::string& addr) { return addr.rfind("127.", 0) == 0; }

std::vector<std::string> connect_all(const std::vector<Endpoint>& endpoints, Millis timeout) {
  std::vector<std::string> result(endpoints.size(), "timed out after " +
                                                        std::to_string(timeout.count()) + " ms");
  std::vector<UniqueFd> fds(endpoints.size());
  std::vector<pollfd> polls;
  std::vector<size_t> which;
  for (size_t i = 0; i < endpoints.size(); ++i) {
    sockaddr_in sa;
    if (!to_sockaddr(endpoints[i], &sa)) {
      result[i] = "'" + endpoints[i].addr + "' is not an IPv4 address";
      continue;
    }
    fds[i].reset(::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
    if (!fds[i].valid()) {
      result[i] = std::string("socket: ") + std::strerror(errno);
      continue;
    }
    int rc = ::connect(fds[i].get(), reinterpret_cast<sockaddr*>(&sa), sizeof sa);
    if (rc == 0) {
      result[i].clear();
      fds[i].reset();
    } else if (errno != EINPROGRESS) {
      result[i] = std::strerror(errno);
      fds[i].reset();
    } else {
      polls.push_back({fds[i].get(), POLLOUT, 0});
      which.push_back(i);
    }
  }
  Deadline deadline(timeout);
  size_t pending = polls.size();
  while (pending > 0 && !deadline.expired()) {
    int n = ::poll(polls.data(), polls.size(), static_cast<int>(deadline.remaining().count()) + 1);
    if (n < 0 && errno != EINTR) break;
    for (size_t k = 0; k < polls.size(); ++k) {
      if (polls[k].fd < 0 || polls[k].revents == 0) continue;
      size_t i = which[k];
      int err = 0;
      socklen_t len = sizeof err;
      ::getsockopt(polls[k].fd, SOL_SOCKET, SO_ERROR, &err, &len);
      result[i] = err == 0 ? "" : std::strerror(err);
      fds[i].reset();
      polls[k].fd = -1;  // poll ignores negative descriptors
      --pending;
    }
  }
  return result;
}

UniqueFd connect_one(const Endpoint& e, Millis timeout) {
  std::string where = e.addr + ":" + std::to_string(e.port);
  sockaddr_in sa;
  if (!to_sockaddr(e, &sa)) throw_invalid_argument("'" + e.addr + "' is not an IPv4 address");
  UniqueFd fd(::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
  if (!fd.valid()) throw_io("socket", errno);
  if (::connect(fd.get(), reinterpret_cast<sockaddr*>(&sa), sizeof sa) != 0) {
    if (errno != EINPROGRESS) throw_io("connect " + where, errno);
    pollfd p{fd.get(), POLLOUT, 0};
    if (::poll(&p, 1, static_cast<int>(timeout.count())) <= 0) {
      throw_timeout("connect " + where + ": no answer within " + std::to_string(timeout.count()) + " ms");
    }
    int err = 0;
    socklen_t len = sizeof err;
    ::getsockopt(fd.get(), SOL_SOCKET, SO_ERROR, &err, &len);
    if (err != 0) throw_io("connect " + where, err);
  }
  int flags = ::fcntl(fd.get(), F_GETFL);
  ::fcntl(fd.get(), F_SETFL, flags & ~O_NONBLOCK);
  int one = 1;
  ::setsockopt(fd.get(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  set_timeouts(fd.get(), timeout);
  return fd;
}

UniqueFd listen_on(int port, int* bound, std::string* error) {
  UniqueFd fd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!fd.valid()) {
    *error = std::string("socket: ") + std::strerror(errno);
    return fd;
  }
  int one = 1;
  ::setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_addr.s_addr = htonl(INADDR_ANY);
  sa.sin_port = htons(static_cast<uint16_t>(port));
  if (::bind(fd.get(), reinterpret_cast<sockaddr*>(&sa), sizeof sa) != 0 ||
      ::listen(fd.get(), 128) != 0) {
    *error = std::to_string(port) + ": " + std::strerror(errno);
    return UniqueFd();
  }
  socklen_t len = sizeof sa;
  ::getsockname(fd.get(), reinterpret_cast<sockaddr*>(&sa), &len);
  *bound = ntohs(sa.sin_port);
  return fd;
}

bool read_all(int fd, void* data, size_t n) {
  char* p = static_cast<char*>(data);
  while (n > 0) {
    ssize_t r = ::read(fd, p, n);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return false;
    p += r;
    n -= static_cast<size_t>(r);
  }
  return true;
}

}  // namespace hpct::doctor
