// Where each rank of a job runs: hosts are filled by their slots, in order,
// as mpirun --map-by slot does, so `-H a:2,b:2 -np 3` puts ranks 0,1 on a and
// rank 2 on b. Pure functions; thread-safe.
#pragma once

#include <string>
#include <vector>

#include "launch/hostfile.h"

namespace hpct::launch {

struct RankPlacement {
  int rank = 0;
  std::string host;    // the host's name as the hostfile wrote it
  int local_rank = 0;  // index among the ranks on this host
  int local_size = 1;
  int cross_rank = 0;  // index of this host among the hosts that got ranks
  int cross_size = 1;
};

// One entry per rank. np < 1 or np above the hosts' total slots raise
// InvalidArgument naming the total and where the hosts came from.
std::vector<RankPlacement> place_ranks(const std::vector<HostEntry>& hosts, int np);

// The hosts that received at least one rank, in order, with the number of
// ranks each received as its slots (what mpirun's --host should list).
std::vector<HostEntry> used_hosts(const std::vector<RankPlacement>& ranks);

}  // namespace hpct::launch

namespace hpct::launch {

// Where the K parameter servers of a job run (launch --servers K): server s
// on server_hosts[s % size] when hosts are given, else on the workers'
// hosts in turn (server s on the s-th host that got ranks, wrapping). Their
// entries continue the workers' numbering (rank = workers + s); local_rank
// and local_size count the servers on each host, cross_rank the host among
// the servers' hosts. K < 0 raises InvalidArgument.
std::vector<RankPlacement> place_servers(const std::vector<RankPlacement>& workers,
                                         const std::vector<std::string>& server_hosts, int servers);

}  // namespace hpct::launch
