// Negotiation: how the ranks agree on which named tensors to communicate, and
// in which order, when each rank submits them in its own order.
//
// The protocol. Every rank's engine thread runs rounds; a round is a sequence
// of collectives on the engine's communicator, so every rank takes part in
// every round (when a rank enters one is engine.cc's pacing rule: at once when
// it has new tensors, every HPCT_CYCLE_MS while anything is pending anywhere,
// and at least every idle period otherwise, so a rank that waits for a
// silent one is never stuck inside a collective longer than that).
//
//   1. Cached phase (skipped while the response cache is empty). Each rank
//      builds a byte vector v: v[0] = 1 unless it needs a full phase (it
//      holds a tensor that is not cached, or one that has waited too long, or
//      it is shutting down); v[1 + i] = 1 when it holds, unreported, the
//      tensor of cache entry i with the cached signature. One allreduce(min)
//      over v. Entries whose byte is 1 everywhere are ready on every rank:
//      each rank plans them (fusion.h) in cache-index order and executes the
//      plan. No coordinator, one collective: the steady state of training.
//   2. Full phase, when the cached phase's v[0] came out 0, when the
//      previous full phase left tensors pending, or when the cache is empty.
//      a. Each rank encodes a RequestList: every tensor it holds that it has
//         not reported yet (cached or not; tensors executed in phase 1 are
//         gone), and its shutdown flag. It marks them reported: from now on
//         only the coordinator's answer completes them, and their cache bits
//         stay 0.
//      b. allgather of the lengths, allgatherv of the lists (comm has no
//         gather; the bytes are small). Rank 0, the coordinator, decodes them.
//      c. The coordinator adds each rank's requests to its table (name ->
//         request per rank), in rank order and list order. A name now held by
//         every rank is ready; the ready names, in the order they became
//         ready, are checked (kind, dtype, op, root, compression, and shape;
//         for allgather all dimensions but the first) and planned: a
//         mismatch becomes an error response naming the tensor and every
//         rank's signature; allreduces and broadcasts go through fusion.h;
//         each allgather is one response with every rank's first dimension.
//         The stall inspector looks at the rest (warning, or an error
//         response after HPCT_STALL_ABORT_S).
//      d. broadcast of the length, broadcast of the encoded ResponseList
//         (responses, shutdown flag and the lowest rank that asked,
//         whether the table still holds tensors).
//      e. Every rank executes the responses in order, and adds the requests
//         of every successful allreduce and broadcast to its response cache
//         (every rank adds the same requests in the same order, so the caches
//         stay identical without ever being exchanged).
//   3. On shutdown every rank fails the handles it still holds and stops.
//   4. About every HPCT_STRAGGLER_WINDOW_S / 10 seconds, after a round that
//      does not stop, one allgather of 128 bytes per rank: the straggler
//      exchange (straggler.h), at the same round on every rank.
//
// Why no deadlock: a rank never blocks on one named tensor; it reports what
// it has and executes only what every rank has reported, in one order that
// every rank receives. Why it is cheap: phase 1 is one collective of
// (cache size + 1) bytes; phase 2 is four small collectives.
//
// Threads: a Controller is used only by the engine's background thread (the
// communicator's single user). Collectives run with the communicator's
// timeout (HPCT_TIMEOUT_S); their errors propagate.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "comm/communicator.h"
#include "core/clock.h"
#include "engine/message.h"
#include "engine/response_cache.h"
#include "engine/stall_inspector.h"

namespace hpct::engine {

struct ControllerOptions {
  std::size_t fusion_bytes = 64 << 20;
  std::size_t cache_capacity = 1024;
  double stall_warn_s = 60;
  double stall_abort_s = 0;
};

class Controller {
 public:
  Controller(comm::Communicator& comm, const ControllerOptions& options, Logger logger);
  Controller(const Controller&) = delete;
  Controller& operator=(const Controller&) = delete;

  struct CachedRound {
    std::vector<std::size_t> ready;  // cache indices ready on every rank, ascending
    bool full_needed = false;        // some rank asked for a full phase
  };
  // Phase 1. bits has cache().size() entries (1: held and unreported).
  CachedRound cached_round(const std::vector<std::uint8_t>& bits, bool want_full);

  // Phase 2 (a is the caller's: mine holds its unreported requests).
  ResponseList full_round(const RequestList& mine);

  // The plan for cache entries that phase 1 found ready.
  std::vector<Response> plan_cached(const std::vector<std::size_t>& ready) const;

  ResponseCache& cache() { return cache_; }
  // Stall warnings logged so far (thread-safe).
  std::uint64_t stall_warnings() const { return stall_.warnings(); }
  std::size_t fusion_bytes() const { return options_.fusion_bytes; }

 private:
  struct TableEntry {
    std::vector<Request> requests;  // one per rank that reported it
    std::vector<int> ranks;
    SteadyClock::time_point since;
  };

  ResponseList coordinate(const std::vector<RequestList>& lists);
  // Appends to out the response for one name held by every rank (an error
  // response on a mismatch); allreduces and broadcasts go to `fusable`.
  void decide(const std::string& name, TableEntry& e, std::vector<Response>& out,
              std::vector<const Request*>& fusable);

  comm::Communicator& comm_;
  ControllerOptions options_;
  Logger logger_;
  ResponseCache cache_;
  StallInspector stall_;
  // Coordinator state (rank 0 only).
  std::unordered_map<std::string, TableEntry> table_;
};

}  // namespace hpct::engine
