// torchrun's variables for the ranks hpctrain launch starts, so that an
// unmodified torch.distributed script (init_process_group with env://, the
// default) runs under `hpctrain launch` as it does under torchrun.
//
// Job-wide: MASTER_ADDR (rank 0's host; 127.0.0.1 when every rank runs on the
// launcher's host) and MASTER_PORT (a port free on the launcher's host when
// it was chosen: a guess for a remote rank 0, which torch reports clearly if
// taken). Per rank: RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, the same
// numbers as HPCT_RANK, HPCT_SIZE, HPCT_LOCAL_RANK and HPCT_LOCAL_SIZE.
// MASTER_ADDR and MASTER_PORT the user set (--env) are kept.
//
// Horovod's too, as horovodrun sets them, for scripts that read them:
// HOROVOD_RANK, HOROVOD_SIZE, HOROVOD_LOCAL_RANK, HOROVOD_LOCAL_SIZE,
// HOROVOD_CROSS_RANK, HOROVOD_CROSS_SIZE and HOROVOD_HOSTNAME.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "launch/placement.h"

namespace hpct::launch {

// Adds MASTER_ADDR and MASTER_PORT to env where missing. ranks: the
// placement by rank (empty under srun: then MASTER_ADDR is left out, and
// hpctrain.torch fills it in from its own rendezvous). all_local: every rank
// runs on the launcher's host. port: from pick_free_port().
void add_torchrun_master_env(std::map<std::string, std::string>& env,
                             const std::vector<RankPlacement>& ranks, bool all_local, int port);

// Sets RANK, WORLD_SIZE, LOCAL_RANK and LOCAL_WORLD_SIZE, and Horovod's
// HOROVOD_* equivalents, for rank p of size.
void add_torchrun_rank_env(std::map<std::string, std::string>& env, const RankPlacement& p, int size);

// A TCP port that is free on this host's loopback now (Io if none can be bound).
int pick_free_port();

}  // namespace hpct::launch
