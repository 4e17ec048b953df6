// TCP sockets for the data server and its clients: a listening socket bound
// to a chosen address, and a connect with a deadline. Non-blocking
// descriptors, as store/auth.h's I/O expects.
#pragma once

#include <string>

#include "core/clock.h"
#include "core/fd.h"

namespace hpct::data {

// Binds address:port (port 0: ephemeral) with SO_REUSEADDR, so a restarted
// server can take its port back at once. Io naming address:port on failure.
UniqueFd listen_tcp(const std::string& address, int port, int* bound_port);

// Connects with TCP_NODELAY before until. PeerFailure when refused or
// unreachable, Timeout when until passes.
UniqueFd connect_tcp(const std::string& host, int port, SteadyClock::time_point until);

// "127.0.0.1:54321" for the peer of a connected socket.
std::string peer_address(int fd);

}  // namespace hpct::data
