// The Gloo backend of the Communicator: collectives over Gloo's TCP
// transport, for ranks that were not started by an MPI launcher (and for
// ranks living as threads of one test process).
//
// Connecting: GlooCommunicator::connect() binds a gloo::transport::tcp device
// to GlooOptions::address (or the interface), meets the other ranks through
// the Store (GlooStoreAdapter; Gloo's keys live under "gloo/"), builds a full
// mesh of TCP connections (gloo::rendezvous::Context::connectFullMesh) and
// publishes, under "hpct/addr/<rank>", the host and the listening address of
// each of its connections, so that a Gloo error naming a peer's address
// ("Connection closed by peer [127.0.0.1]:41234") can be mapped to a rank.
// Use a fresh store, or a PrefixStore, per communicator: keys are never
// deleted and a second world in the same namespace would read stale ones.
//
// Hierarchical allreduce (GlooOptions::hierarchical; several hosts with the
// same number L > 1 of ranks each, sum or avg above direct_allreduce_bytes):
//   1. the L ranks of a host allreduce the whole buffer in shared memory;
//   2. local rank l allreduces slice l of it (L equal slices) with the
//      local rank l of every other host, over a DirectMesh of those ranks;
//   3. each rank zeroes all but its slice and the host allreduces again in
//      shared memory: every slice comes back from its owner (x + 0 is x).
// Each host moves 1/L of the bytes per cross-host connection instead of one
// rank's whole ring share; every rank ends with the same bits. Min, max and
// product, and small messages, take the flat paths below.
//
// Operations: allreduce (Gloo ring, our reduce_elements as the reduction so
// every dtype reduces the same way on every backend; avg = sum then one
// division; small ones, and all with 2 ranks, over hpctrain's own
// connections instead, comm/direct_mesh.h), broadcast (Gloo's binomial tree), allgatherv
// (Gloo ring; allgather is an allgatherv with equal counts), reduce_scatter (our ring over Gloo
// unbound buffers), send/recv (unbound buffers); barrier is a one-byte allreduce (comm::barrier). Each passes its timeout to every Gloo wait.
// Count 0 returns at once without touching the network (every rank passes the same count); a world
// of one rank never creates a Gloo context at all.
//
// Failures: a Gloo timeout becomes Timeout, a closed or reset connection
// PeerFailure; the message names this rank, the op, the bytes, and the
// failed peer rank and host. Before raising, the ranks exchange failure
// reports through the store (failure_report.h) so that each names the root
// cause. This adds at most failure_report_wait to the time an op takes to
// fail (so an op fails within its timeout plus that wait). After a failure
// every later op raises the same error at once (FailureLatch).
//
// Signals: connecting a world of more than one rank sets SIGPIPE to ignored
// if it still has its default action (a write to a dead peer's socket must
// become PeerFailure, not kill the process); a program's own handler is kept.
//
// Threads: as Communicator: one op at a time per communicator; separate
// communicators may run in parallel (Gloo runs one I/O thread per device).
// The destructor closes the connections and returns in bounded time, also
// after a failure and with peers stopped or dead.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "comm/direct_mesh.h"
#include "comm/failure_latch.h"
#include "comm/shm_allreduce.h"
#include "core/clock.h"
#include "core/log.h"
#include "store/store.h"

namespace gloo {
class Context;
namespace transport {
class Device;
}
}  // namespace gloo

namespace hpct::comm {

struct GlooOptions {
  int rank = 0;
  int size = 1;
  std::shared_ptr<store::Store> store;  // shared by all ranks of this world
  // The IP address the TCP device binds to and that peers connect to. Empty:
  // use `interface` instead.
  std::string address = "127.0.0.1";
  std::string interface;  // network interface name ("eth0"), used when address is empty
  Millis timeout{30000};  // default for ops and for connecting (HPCT_TIMEOUT_S)
  // How long a failing rank waits for the other ranks' failure reports
  // (failure_report.h); capped at half the op's timeout.
  Millis failure_report_wait{2000};
  Logger logger;
  // When every rank is on this host (same boot, network namespace and host
  // name), allreduces go through shared memory (comm/shm_allreduce.h)
  // instead of Gloo's TCP ring (HPCT_SHM; connect_world turns it on).
  bool shm = false;
  std::size_t shm_slot_bytes = 4 << 20;  // HPCT_SHM_SLOT_BYTES
  // Without shared memory, allreduces of at most this many bytes go over a
  // DirectMesh (comm/direct_mesh.h: recursive doubling on plain TCP
  // connections made beside Gloo's), where Gloo's per-message cost
  // dominates; with 2 ranks every size does (one exchange, the ring's bytes,
  // no I/O thread). 0: every allreduce takes Gloo's ring.
  // HPCT_DIRECT_ALLREDUCE_BYTES.
  std::size_t direct_allreduce_bytes = 64 << 10;
  // Several ranks on each of several hosts (the same number on each): sum and
  // avg allreduces above direct_allreduce_bytes go hierarchically (see
  // GlooCommunicator). connect_world sets it from HPCT_SHM.
  bool hierarchical = false;
  // Tests: this rank's host as the hierarchy sees it (0: the real one,
  // comm/shm_allreduce.h host_identity()), so threads can play hosts.
  std::int64_t host_identity = 0;
};

class GlooCommunicator final : public Communicator {
 public:
  // Blocks until every rank has connected, or raises Timeout naming the ranks
  // that never showed up (within options.timeout); InvalidArgument for bad
  // options; Io when the address cannot be bound.
  static std::unique_ptr<GlooCommunicator> connect(const GlooOptions& options);

  ~GlooCommunicator() override;

  const char* backend_name() const override { return "gloo"; }
  std::string algorithm(OpKind op, size_t bytes) const override;

  // The host name and listening address(es) of a rank, as published at
  // connect time ("node3 127.0.0.1"); for messages. Thread-safe.
  std::string describe_rank(int rank) const;

  // Gloo's own context, for the benchmark that times gloo::allreduce beside
  // ours on the same connections. Null for a world of one rank. Not for
  // regular use: an op on it bypasses our timeouts and failure handling.
  std::shared_ptr<gloo::Context> gloo_context() const { return context_; }

 protected:
  // The reductions first (allreduce by shared memory, direct, ring or
  // hierarchical path; reduce-scatter by the ring), then Gloo's own ops.
  void do_allreduce(const AllreduceOptions& o) override;
  bool do_allreduce_segments(const AllreduceSegmentsOptions& o) override;
  void do_reduce_scatter(const ReduceScatterOptions& o) override;
  // Per-rank counts: through shared memory when every rank is on this host
  // (the allreduce of a copy, this rank's block kept: no wire, the
  // allreduce's bits), else over the DirectMesh when there is one, else
  // over Gloo's send and receive (Communicator's default); all sum in rank
  // order.
  void do_reduce_scatter_v(const ReduceScatterOptions& o) override;
  void do_broadcast(const BroadcastOptions& o) override;
  void do_allgatherv(const AllgathervOptions& o) override;
  void do_send(const SendOptions& o) override;
  void do_recv(const RecvOptions& o) override;

 private:
  // What this rank knows of another: its host and the listening addresses
  // (Gloo's "[ip]:port" strings) of its connections.
  struct PeerInfo {
    std::string host;
    std::string ip;
    std::vector<std::string> addresses;
  };

  explicit GlooCommunicator(const GlooOptions& options);
  void connect_mesh();
  void publish_and_read_addresses();
  // Also maps the ephemeral ports of the connections each rank opened, which
  // is what Gloo prints when such a connection fails.
  void publish_and_read_outgoing_addresses();

  // Runs one op: the latch check, then fn; any Gloo exception goes through
  // fail(). `what` describes the op for messages ("allreduce of 4096 bytes
  // (1024 float32)"); peer is the rank a point-to-point op talks to.
  template <typename Fn>
  void run(const std::string& what, Millis timeout, int peer, Fn&& fn);
  [[noreturn]] void fail(const std::string& what, Millis timeout, int peer, ErrorCode code,
                         const std::string& detail);
  int rank_of_address(const std::string& gloo_message) const;

  // The allreduce paths, one file each: ring.cc, direct.cc, hierarchical.cc.
  void ring_allreduce(const AllreduceOptions& o);
  void ring_reduce_scatter(const ReduceScatterOptions& o);
  void connect_direct(const std::string& who);
  void direct_allreduce(const AllreduceOptions& o);

  std::shared_ptr<store::Store> store_;
  GlooOptions options_;
  std::string host_;
  std::shared_ptr<gloo::transport::Device> device_;
  std::shared_ptr<gloo::Context> context_;
  std::unique_ptr<ShmAllreduce> shm_;
  std::unique_ptr<DirectMesh> direct_;  // set by connect() when allreduces may take it
  struct Hierarchy {
    int local_rank = 0;
    int local_size = 1;
    std::unique_ptr<ShmAllreduce> host;  // this host's ranks
    std::unique_ptr<DirectMesh> across;  // local rank l of every host
    std::vector<int> local_world_ranks;  // this host's ranks, by local rank
  };
  std::unique_ptr<Hierarchy> hier_;  // set by connect() (GlooOptions::hierarchical)
  void connect_hierarchy();
  bool takes_hierarchy(size_t bytes, ReduceOp op) const {
    return hier_ != nullptr && bytes > options_.direct_allreduce_bytes &&
           (op == ReduceOp::kSum || op == ReduceOp::kAvg);
  }
  void hierarchical_allreduce(const AllreduceOptions& o);
  bool takes_direct(size_t bytes) const {
    return direct_ != nullptr && (size_ == 2 || bytes <= options_.direct_allreduce_bytes);
  }
  template <typename Fn>
  void run_shm(size_t count, DataType dtype, Millis timeout,
               Fn&& fn);         // set by connect() when options.shm and all ranks are local
  std::vector<PeerInfo> peers_;  // by rank; written once in connect()
  FailureLatch latch_;
};

}  // namespace hpct::comm
