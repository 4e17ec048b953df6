// TCP sockets for every connection hpctrain opens itself (the job store, the
// data server, the parameter servers, the direct mesh, the doctor's probes):
// a listening socket bound to a chosen address, a connect with a deadline,
// peer addresses for messages, and the one bounded read-exactly and
// write-all. Sockets are non-blocking; every wait has a deadline and may be
// woken by a wake descriptor (a server stopping). auth.h holds the
// handshake, frame.h the framed messages on top.
#pragma once

#include <sys/socket.h>

#include <cstddef>
#include <string>
#include <string_view>

#include "core/clock.h"
#include "core/fd.h"

namespace hpct::net {

// Raised by the I/O below when wake_fd becomes readable; not an hpct::Error
// because it is not a failure, only a server stopping.
struct Woken {};

// No deadline: wait until data arrives or wake_fd fires.
constexpr SteadyClock::time_point kNoDeadline = SteadyClock::time_point::max();

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

// Reads exactly n bytes. what names the peer ("store client
// 127.0.0.1:4242") for messages. PeerFailure when the peer closes or
// resets, Timeout ("timed out reading from <what>") when until passes, Io
// for other socket errors, Woken when wake_fd (may be -1) is readable.
void read_exact(int fd, void* buf, size_t n, SteadyClock::time_point until, int wake_fd,
                const std::string& what);

// Writes all n bytes: the one write-all of the project. On a socket it
// never raises SIGPIPE and never blocks past until; on a pipe or file
// (anything send(2) refuses with ENOTSOCK) it falls back to write(2), which
// waits for a non-blocking pipe within until and blocks on a blocking one as
// write(2) does. Errors as read_exact ("timed out writing to <what>"); a
// file's error (a full disk) is Io naming what.
void write_all(int fd, const void* buf, size_t n, SteadyClock::time_point until, int wake_fd,
               const std::string& what);

// The same, for callers that only need to know whether the reader is still
// there: false instead of an error (the reader left, the deadline passed).
bool try_write_all(int fd, const void* buf, size_t n, SteadyClock::time_point until);
bool try_write_all(int fd, std::string_view data, SteadyClock::time_point until = kNoDeadline);

// Waits until fd is readable; same errors as read_exact, except that a
// closed peer also counts as readable.
void wait_readable(int fd, SteadyClock::time_point until, int wake_fd, const std::string& what);
// Waits until fd takes more bytes; same errors as write_all.
void wait_writable(int fd, SteadyClock::time_point until, int wake_fd, const std::string& what);

}  // namespace hpct::net
