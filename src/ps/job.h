// How a job's parameter servers and workers find each other (launch
// --servers K; the protocol itself is in ps/server.h).
//
//  1. `hpctrain launch` starts K extra processes, `hpctrain ps-server`, with
//     HPCT_PS_ROLE=server, HPCT_PS_SERVER_RANK=s, HPCT_PS_WORKERS=W; the
//     workers get HPCT_PS_ROLE=worker and HPCT_PS_SERVERS=K.
//  2. Each server opens the job's store (HPCT_STORE_ADDR and the secret on
//     HPCT_SECRET_FD), listens on its host's address towards the store and
//     sets ps/server/<s> = "<host> <address>:<port>" under the job's and the
//     restart's prefix (a restarted job never meets the last attempt's
//     servers).
//  3. A worker reads the second secret line on HPCT_SECRET_FD (the first
//     went to hpct::init), waits (bounded by HPCT_TIMEOUT_S) for all K keys
//     and connects with ps::Client.
// Thread-safe free functions; every wait is bounded.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "core/config.h"
#include "core/env.h"
#include "ps/client.h"
#include "store/store.h"

namespace hpct::ps {

// What the launcher told this process about the parameter servers.
struct JobRole {
  bool server = false;
  int servers = 0;       // K; 0: the job has none
  int server_rank = -1;  // this server's index (servers only)
  int workers = 0;       // W
  std::string host;      // HPCT_HOSTNAME (or the host's name)
};
JobRole job_role(const Env& env);

// The job's store under "<job>/restart<R>/ps", and the secret (read from
// HPCT_SECRET_FD: the next line there). InvalidArgument naming what is
// missing when the process was not started by `hpctrain launch --servers`.
std::shared_ptr<store::Store> open_job_store(const Config& config, const Env& env,
                                             std::string* secret);

void publish_server(store::Store& store, int server_rank, const std::string& host,
                    const std::string& address, int port);
// Every server's address, waiting up to timeout (Timeout naming the
// servers that never published).
std::vector<ServerAddress> find_servers(store::Store& store, int servers, Millis timeout);

// "ps" -> kSync, "ps-async" -> kAsync; InvalidArgument otherwise.
Mode parse_sync_mode(const std::string& sync);

}  // namespace hpct::ps
