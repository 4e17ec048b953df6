// The TCP round trip between rank 0 and every other rank of a job, measured
// on a fresh connection outside any collective library: the floor that a
// small allreduce across hosts is compared with (`hpctrain bench comm`).
//
// Protocol: every rank but 0 listens on the local address of its existing
// connections (the network the job's collectives use; loopback when it has
// none) and publishes address and port through an allgather. Rank 0 then
// connects to each in rank order, sends `warmup + pings` one-byte messages
// and waits for each echo, and closes; each rank echoes until its
// connection closes. All ranks call it together; every wait is bounded by
// `timeout` (Timeout or PeerFailure naming the rank).
#pragma once

#include <vector>

#include "comm/communicator.h"
#include "core/clock.h"

namespace hpct::bench {

struct TcpRoundTrip {
  int peer_rank = 0;
  std::string address;  // the peer's "ip:port"
  double median_us = 0;
  double min_us = 0;
};

// On rank 0: one entry per other rank. Elsewhere: empty.
std::vector<TcpRoundTrip> measure_tcp_round_trips(comm::Communicator& comm, int pings,
                                                  Millis timeout);

// The IPv4 address this process uses to reach its peers: the local address
// of an established TCP connection that is not loopback, else 127.0.0.1.
std::string job_network_address();

}  // namespace hpct::bench
