// DirectMesh: hpctrain's own full mesh of plain TCP connections between the
// ranks of one world, for the allreduces where Gloo's per-message cost
// dominates: small messages (a 4 KiB allreduce took 5-6x the TCP round trip
// through Gloo's ring across two namespace hosts, where one exchange on a
// socket of our own takes about one round trip; docs/comm.md).
//
// Why not Gloo: every Gloo message goes through the device's I/O thread
// (two thread hand-offs per message) and its ring takes 2(n-1) steps. Here
// the calling thread writes and reads the sockets itself (non-blocking, one
// poll() per wait) and the algorithm is recursive doubling: log2(n) steps,
// plus one fold step in and out for the ranks beyond the largest power of two.
//
// Connecting (connect(), once, beside Gloo's mesh):
//   1. every rank listens on `ip` (an ephemeral port) and publishes
//      "<prefix>addr/<rank>" = "ip port" in the job's store; rank 0 publishes
//      a random token under "<prefix>token" (the store is authenticated, so
//      only the job's ranks learn it);
//   2. rank r connects to every rank below it, runs net/auth.h's mutual
//      HMAC handshake with the token as the secret, and sends its rank (4
//      bytes, little-endian) in one sealed frame (net/frame.h);
//   3. rank r accepts one connection from every rank above it, and drops any
//      connection that fails the handshake (no token: refused on its proof,
//      or when 5 s pass) or names a rank it does not expect.
//   Every step is bounded by the timeout; a missing rank is named. After
//   this the sockets carry raw bytes: the peers were authenticated once.
//
// Allreduce (allreduce()): p = the largest power of two <= n, rem = n - p.
//   fold in:  ranks r < 2*rem: an even r sends its data to r+1 and waits;
//             an odd r adds it. The others take part as they are.
//   doubling: for mask 1, 2, ... < p the remaining ranks exchange their
//             whole buffer with the partner (virtual rank xor mask) and
//             reduce, piece by piece as the bytes arrive (a piece is
//             reduced in place once it has also been sent). Each step reduces as f(lower rank's
//             data, higher rank's data), so both partners compute the same bits and every rank ends
//             with identical results (also for min/max with NaN).
//   fold out: each odd r < 2*rem sends the result back to r-1.
//   avg: a sum, then one division (finish_average), as the other paths.
// From ring_from_bytes on (the hierarchical path's meshes across hosts use
// kHierarchyRingFromBytes), 3 or more ranks take a ring instead: n chunks,
// n-1 steps sending one chunk right while receiving one from the left and
// reducing it as it arrives, then n-1 steps passing the finished chunks on.
// Each chunk is finished by one rank, so every rank gets the same bits.
//
// Failures: a closed or reset connection raises DirectLinkError with code
// PeerFailure and the peer's rank; no data within the deadline raises it
// with code Timeout. The caller (GlooCommunicator) turns it into its named
// error and calls close(), so the peers blocked on this rank fail at once.
//
// With 2 ranks this is one exchange that moves the same bytes as a ring
// (each rank sends S, receives S), so GlooCommunicator takes it for every
// size there; with more ranks recursive doubling sends S log2(n) against the
// ring's 2S(n-1)/n, so only small messages take it.
//
// Threads: one operation at a time (the Communicator's rule); close() may be
// called from the failing thread only. Not copyable.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "comm/types.h"
#include "core/clock.h"
#include "core/error.h"
#include "core/fd.h"
#include "store/store.h"

namespace hpct::comm {

// A failure on one connection of the mesh, with the peer it talked to.
class DirectLinkError : public std::runtime_error {
 public:
  DirectLinkError(ErrorCode code, int peer, const std::string& detail)
      : std::runtime_error(detail), code_(code), peer_(peer) {}
  ErrorCode code() const { return code_; }
  int peer() const { return peer_; }

 private:
  ErrorCode code_;
  int peer_;
};

// The hierarchical path's ring_from_bytes (its meshes across hosts); plan's
// cost model (plan/cost_model.cc) mirrors it.
constexpr std::size_t kHierarchyRingFromBytes = std::size_t{256} << 10;

struct DirectMeshOptions {
  int rank = 0;
  int size = 1;
  std::shared_ptr<store::Store> store;  // the world's (authenticated) store
  std::string ip;                       // the address this rank listens on (Gloo's)
  Millis timeout{30000};                // for connecting
  std::string key_prefix = "hpct/direct/";
  // A mesh of some of the world's ranks: the world rank of each mesh rank,
  // for messages and DirectLinkError::peer() (empty: the same numbers).
  std::vector<int> world_ranks;
  // From this many bytes on, a mesh of 3 or more ranks reduces with a ring
  // (reduce-scatter, then allgather) instead of recursive doubling: each
  // rank then sends 2S(n-1)/n in 2(n-1) steps rather than S per doubling
  // step and fold. The default keeps doubling for every size.
  std::size_t ring_from_bytes = SIZE_MAX;
};

class DirectMesh {
 public:
  // Blocks until this rank is connected to every other rank; Timeout naming
  // the ranks that never published or connected, Io when `ip` cannot be
  // bound.
  static std::unique_ptr<DirectMesh> connect(const DirectMeshOptions& options);

  DirectMesh(const DirectMesh&) = delete;
  DirectMesh& operator=(const DirectMesh&) = delete;

  // In place on data (count elements of dtype); every rank passes the same
  // count, dtype and op. Raises DirectLinkError (see the file comment).
  void allreduce(void* data, std::size_t count, DataType dtype, ReduceOp op,
                 const Deadline& deadline);

  // Reduce-scatter with per-rank counts (communicator.h's
  // ReduceScatterOptions::counts): in n-1 steps this rank sends block p of
  // input to rank p while receiving its own block from another rank, then
  // reduces the n blocks in rank order into output. Each rank sends what
  // it does not keep, half of what an allreduce with 2 ranks sends.
  void reduce_scatter(const void* input, void* output, const std::vector<std::size_t>& counts, DataType dtype,
                      ReduceOp op, const Deadline& deadline);

  // Shuts every connection down: peers blocked on this rank see the
  // connection close at once. Later operations raise.
  void close();

 private:
  int world(int peer) const {
    return options_.world_ranks.empty() ? peer : options_.world_ranks[static_cast<size_t>(peer)];
  }
  explicit DirectMesh(const DirectMeshOptions& options);
  // What exchange() reduces as the bytes come in: data[i] = f(lower rank's,
  // higher rank's) for every element both sent and received.
  struct Reduction {
    void* data;
    DataType dtype;
    ReduceOp op;
    bool peer_is_lower;
    bool after_send = true;  // in place: a piece is reduced once it is also sent
  };
  // Sends `send_bytes` from send to peer and receives `recv_bytes` into recv,
  // both at once (either may be 0). With `reduction` (send == data, recv ==
  // scratch, equal sizes), each piece is reduced into data once it is both
  // sent and received, so the reduction overlaps the transfer.
  void exchange(int peer, const void* send, std::size_t send_bytes, void* recv,
                std::size_t recv_bytes, const Deadline& deadline,
                const Reduction* reduction = nullptr);
  // As exchange(), sending to `to` while receiving from `from`.
  void transfer(int to, const void* send, std::size_t send_bytes, int from, void* recv,
                std::size_t recv_bytes, const Deadline& deadline,
                const Reduction* reduction = nullptr);
  // The ring (DirectMeshOptions::ring_from_bytes), op already a sum for avg.
  void ring_allreduce(void* data, std::size_t count, DataType dtype, ReduceOp op,
                      const Deadline& deadline);

  const DirectMeshOptions options_;
  std::vector<UniqueFd> peers_;  // by rank; invalid for this rank
  std::vector<std::uint8_t> scratch_;
  bool closed_ = false;
};

}  // namespace hpct::comm
