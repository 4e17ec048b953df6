// Supervision of an elastic job (`hpctrain launch --min-np A --max-np B
// [--host-discovery-script S]`): workers come and go while the job runs.
// The store protocol with the workers is in elastic_protocol.h; starting a
// worker, its records and teardown are the same as for a fixed job
// (rank_protocol.h, supervisor.h), with the worker's id in place of a rank.
//
// Loop (one thread, every wait bounded):
//  1. Discovery: every discovery_interval run the script (bounded by
//     discovery_timeout; it prints `host:slots` lines, `host` alone meaning
//     one slot), or take the fixed host list. Hosts on the blacklist are
//     skipped until their cool-down ends.
//  2. Start workers on discovered hosts with free slots, never more than
//     max_np alive. A worker is ready when it sets `ready/<id>`.
//  3. Losses: a worker whose process ends without having finished (`done`),
//     that a failure report blames, or that is not ready within the start
//     timeout is dropped (its process group SIGTERMed, then SIGKILLed after
//     the grace period) and its host blacklisted for the cool-down.
//  4. Publish the next generation when there is a loss, ready workers to
//     take in (the first generation waits for every starting worker), or
//     members on hosts that discovery no longer lists (they leave at their
//     next commit). Never with fewer than min_np workers: below it the
//     launcher waits up to elastic_timeout for discovery to bring hosts,
//     then fails naming the hosts it lost.
//  5. The job succeeds when every member of the newest generation has
//     ended after finishing; workers still starting are then stopped.
// Every change is a launcher line: who left and why, who joined, the new
// size, and the time from the change until every member arrived.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/clock.h"
#include "core/log.h"
#include "launch/hostfile.h"
#include "launch/output.h"
#include "launch/rank_protocol.h"
#include "launch/spawner.h"
#include "launch/supervisor.h"
#include "store/store.h"

namespace hpct::launch {

struct ElasticOptions {
  int min_np = 1;
  int max_np = 1;
  std::string discovery_script;  // empty: the fixed hosts below
  std::vector<HostEntry> hosts;  // without a script: the hosts and their slots
  Millis discovery_interval{1000};
  Millis discovery_timeout{10000};
  Millis blacklist_cooldown{60000};
  Millis elastic_timeout{60000};  // below min_np, at most this long
  Millis start_timeout{30000};
  Millis grace{3000};
  int signal_fd = -1;
};

// "h1:2\nh2\n" -> entries; InvalidArgument naming the line otherwise.
// Blank lines and # comments are skipped.
std::vector<HostEntry> parse_discovery_output(const std::string& text);

// Runs the discovery script (sh -c) with a bound and parses its output. Io
// naming the script when it fails, Timeout when it does not end in time.
std::vector<HostEntry> discover_hosts(const std::string& script, Millis timeout);

class ElasticSupervisor {
 public:
  // How a worker with this id is started on host (a one-process plan
  // carrying rank `id`).
  using PlanWorker = std::function<ProcessPlan(int id, const std::string& host)>;

  // store: a client of the job's store (unprefixed); output gets a rank
  // per worker (OutputMux::add_rank), numbered by worker id.
  ElasticSupervisor(ElasticOptions options, RankSpec base_spec, PlanWorker plan_worker,
                    OutputMux& output, Logger logger, std::shared_ptr<store::Store> store);
  ~ElasticSupervisor();

  // Runs the job once (HPCT_RESTART=restart) to its end. Blocking.
  AttemptResult run(int restart);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace hpct::launch
