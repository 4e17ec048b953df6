// Small socket helpers for the doctor's probes: name resolution, bounded
// connects to many endpoints at once, listeners. Each call blocks at most
// for the time it is given (getaddrinfo excepted: it is as slow as the
// resolver, which is why the head resolves on worker threads). Thread-safe.
#pragma once

#include <string>
#include <vector>

#include "core/clock.h"
#include "core/fd.h"

namespace hpct::doctor {

// IPv4 addresses of a name or dotted quad; empty with *error set otherwise.
std::vector<std::string> resolve_ipv4(const std::string& name, std::string* error);

bool is_loopback_address(const std::string& addr);  // 127.0.0.0/8

struct Endpoint {
  std::string addr;  // dotted quad
  int port = 0;
};

// Connects to every endpoint at once (nonblocking), waits at most `timeout`
// for all, and closes each socket as soon as it connects. Returns, per
// endpoint, "" on success or the reason ("Connection refused", "timed out
// after 2000 ms").
std::vector<std::string> connect_all(const std::vector<Endpoint>& endpoints, Millis timeout);

// A connected socket with send and receive timeouts of `timeout`; Io or
// Timeout naming the endpoint on failure.
UniqueFd connect_one(const Endpoint& e, Millis timeout);

// A listening TCP socket on 0.0.0.0:port (0: the kernel picks). *bound gets
// the port. Invalid UniqueFd with *error set when it cannot bind.
UniqueFd listen_on(int port, int* bound, std::string* error);

// read(2) of exactly n bytes; false on error, EOF or timeout. Writes go
// through net::try_write_all (net/socket.h).
bool read_all(int fd, void* data, size_t n);

}  // namespace hpct::doctor
