// TCP sockets for every authenticated service of hpctrain (the job store,
// the data server, the parameter servers): a listening socket bound to a
// chosen address, a connect with a deadline, and peer addresses for
// messages. Non-blocking descriptors, as store/auth.h's I/O expects. This is
// the one copy of this code; store/auth.h holds the handshake and frames.
#pragma once

#include <sys/socket.h>

#include <string>

#include "core/clock.h"
#include "core/fd.h"

namespace hpct::store {

// Binds address:port (port 0: ephemeral) with SO_REUSEADDR, so a restarted
// server can take its port back at once, and listens. *bound_port gets the
// port. who names the service for messages ("TCP store server"); Io naming
// who and address:port on failure, InvalidArgument when address does not
// resolve.
UniqueFd listen_tcp(const std::string& address, int port, int* bound_port,
                    const std::string& who);

// Connects with TCP_NODELAY before until. what names the peer for messages
// ("the data server at 10.0.0.2:4000"). PeerFailure when refused or
// unreachable or the name does not resolve, Timeout when until passes.
UniqueFd connect_tcp(const std::string& host, int port, SteadyClock::time_point until,
                     const std::string& what);

// TCP_NODELAY on a connected socket (accepted sockets do not inherit it).
void set_nodelay(int fd);

// "127.0.0.1:54321" or "[::1]:54321" for a socket address; "?" otherwise.
std::string address_of(const sockaddr* sa);
// The same for the peer of a connected socket.
std::string peer_address(int fd);

}  // namespace hpct::store
