// What the launcher of an elastic job (`hpctrain launch --min-np A --max-np
// B`, elastic_supervisor.h) and its workers (elastic/, on their side) say to
// each other through the job's store. Workers keep a stable id for their
// whole life (HPCT_ELASTIC_ID); their rank is only their place in one
// membership generation.
//
// Protocol, step by step (keys under "<job id>/restart<n>/elastic/"):
//  1. The launcher starts a worker with HPCT_ELASTIC_ID=<id>. When the worker
//     is ready to train it sets `ready/<id>`.
//  2. The launcher publishes generation G: it writes `gen/<G>` (a
//     Generation as JSON: the members by id with their rank, host and local
//     and cross ranks; rank 0 is the member that has been in the job
//     longest), then sets `current` to G. Generations only grow, by one.
//  3. Every member of G sets `world<G>/arrived/<rank>` and waits until every
//     member has arrived (or `current` moves past G: then it goes to the
//     newer one). They then connect a communicator whose keys live under
//     `world<G>/`, so the keys of two worlds never mix.
//  4. Members of G train. The launcher publishes G+1 for a change that is
//     not a failure (a host joins, discovery drops a host); the members see
//     it at their next commit (rank 0 reads `current` and the ranks agree
//     through one allreduce), leave their world together and go to 3 with
//     G+1. A worker that is not a member of G+1 ends (exit 0).
//  5. A worker whose operation fails (PeerFailure, Timeout) writes a
//     FailureReport under `report/<n>` (n from the counter `reports`),
//     naming the ranks of G it blames, rolls back to its last commit and
//     waits (bounded, HPCT_ELASTIC_TIMEOUT_S) for a generation after G.
//  6. The launcher reads the reports and watches its processes; it drops the
//     workers that died or were blamed (blacklisting their hosts for a
//     cool-down), and publishes the next generation from the rest (and
//     from new workers that are ready). Below --min-np it waits (bounded)
//     for discovery to bring hosts, then fails naming the hosts it lost.
//  7. `done/<id>`: the worker finished training; its exit is not a loss.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace hpct::launch::elastic {

inline constexpr const char* kPrefix = "elastic";
inline constexpr const char* kCurrentKey = "current";
inline constexpr const char* kReportCounterKey = "reports";

inline std::string generation_key(std::int64_t gen) { return "gen/" + std::to_string(gen); }
inline std::string ready_key(std::int64_t id) { return "ready/" + std::to_string(id); }
inline std::string done_key(std::int64_t id) { return "done/" + std::to_string(id); }
inline std::string report_key(std::int64_t n) { return "report/" + std::to_string(n); }
inline std::string world_prefix(std::int64_t gen) { return "world" + std::to_string(gen); }
inline std::string arrived_key(int rank) { return "arrived/" + std::to_string(rank); }

struct Member {
  std::int64_t id = 0;
  std::string host;
  int rank = 0;
  int local_rank = 0;
  int local_size = 1;
  int cross_rank = 0;
  int cross_size = 1;
};

struct Generation {
  std::int64_t gen = 0;
  std::string reason;           // "start", "failure: ...", "joined: ...", "removed: ..."
  std::vector<Member> members;  // by rank
  // The member with this id, or null.
  const Member* find(std::int64_t id) const;
};

struct FailureReport {
  std::int64_t gen = 0;
  std::int64_t id = 0;      // the reporting worker
  int rank = 0;             // its rank in gen
  std::vector<int> blamed;  // ranks of gen it saw fail (may be empty: a timeout)
  std::string message;
};

// JSON lines; decode raises InvalidArgument naming what is wrong.
std::string encode_generation(const Generation& g);
Generation decode_generation(const std::string& text);
std::string encode_report(const FailureReport& r);
FailureReport decode_report(const std::string& text);

// The peer ranks an hpct::Error message names ("peer rank 2 (...) failed",
// "peer ranks [1, 2] are not responding", "rank(s) [2] did not show up").
std::vector<int> blamed_ranks(const std::string& message);

// Members in rank order for a set of workers: hosts ordered by their
// longest-serving worker, each host's workers together, so rank 0 is the
// worker that joined first (lowest joined_gen, then lowest id) and local and
// cross ranks follow the hosts.
struct Candidate {
  std::int64_t id = 0;
  std::string host;
  std::int64_t joined_gen = 0;
};
std::vector<Member> assign_ranks(std::vector<Candidate> workers);

}  // namespace hpct::launch::elastic
