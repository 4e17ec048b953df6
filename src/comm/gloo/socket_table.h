// This process's established IPv4 TCP connections, read from /proc, in
// Gloo's address format ("[127.0.0.1]:41234").
//
// Why: Gloo names a failed peer by the remote address of the socket, which
// for a connection the peer opened is the peer's ephemeral port, not one of
// the listening addresses it published. Each rank therefore also publishes
// the local addresses of the connections it opened, so any address in a
// Gloo error maps back to a rank (communicator.cc).
#pragma once

#include <string>
#include <vector>

namespace hpct::comm {

struct TcpConnection {
  std::string local;   // "[ip]:port"
  std::string remote;  // "[ip]:port"
};

// Established connections whose socket this process holds open. Empty (never
// an error) when /proc cannot be read: the mapping is a better message, not a
// requirement.
std::vector<TcpConnection> established_tcp_connections();

// Parses one line of /proc/net/tcp ("  0: 0100007F:A1B2 0100007F:1F90 01 ...");
// false for the header or a line it cannot read. Exposed for tests.
bool parse_proc_tcp_line(const std::string& line, TcpConnection* out, unsigned long* inode,
                         int* state);

}  // namespace hpct::comm
