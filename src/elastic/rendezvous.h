// A worker's side of the elastic protocol (launch/elastic_protocol.h): find
// the generation this worker belongs to, meet its other members in a fresh
// world, report failures, notice a newer generation.
//
// Blocking and bounds: every wait here is bounded by HPCT_ELASTIC_TIMEOUT_S
// and raises Timeout saying what it waited for. Not thread-safe: one per
// worker process, used by the thread that runs elastic::run.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "comm/connect.h"
#include "core/config.h"
#include "core/env.h"
#include "core/error.h"
#include "core/log.h"
#include "launch/elastic_protocol.h"
#include "store/store.h"

namespace hpct::elastic {

class Rendezvous {
 public:
  // Opens the job's store (once: the secret is read from HPCT_SECRET_FD).
  // InvalidArgument when the process was not started as an elastic worker
  // (no HPCT_ELASTIC_ID: use `hpctrain launch --min-np A --max-np B`).
  Rendezvous(const Config& config, const Env& env, const Logger& logger);

  std::int64_t id() const { return id_; }
  Millis timeout() const { return timeout_; }

  // Tells the launcher this worker can join at the next generation (once).
  void announce_ready();

  // The newest published generation with a number above `after`, waiting
  // at most `timeout` for one (Timeout naming the job store key otherwise).
  launch::elastic::Generation next_generation(std::int64_t after, Millis timeout);

  // The newest published generation number now (-1: none yet). One store
  // round trip.
  std::int64_t current();

  // Meets the other members of g (arrival keys, then Gloo's rendezvous in the
  // store namespace of g). nullopt when a newer generation was published
  // while waiting (go to it). Timeout when the members do not all arrive in
  // time; PeerFailure/Timeout from connecting.
  std::optional<comm::World> connect(const launch::elastic::Generation& g,
                                     const launch::elastic::Member& me);

  // Writes a failure report for generation g (launch reads it).
  void report_failure(std::int64_t gen, int rank, const Error& e);

  // This worker finished; its exit is not a loss.
  void mark_done();

 private:
  Config config_;
  Logger logger_;
  WorldInfo base_info_;
  std::int64_t id_ = -1;
  Millis timeout_;
  std::string store_host_;
  std::shared_ptr<store::Store> job_store_;  // "<job>/restart<n>"
  std::shared_ptr<store::Store> store_;      // ".../elastic"
  bool ready_announced_ = false;
};

}  // namespace hpct::elastic
