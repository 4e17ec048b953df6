// A parameter server: one of K processes (ranks of `hpctrain ps-server`)
// that hold a share of a job's gradient pieces (sync mode) or parameters
// (async mode) for W workers.
//
// The protocol, step by step (bytes in ps/protocol.h):
//  1. Start. Server s binds an ephemeral port on its host's job address and
//     publishes "host:port" in the job's store under ps/<restart>/server/<s>
//     (the ps-server command does this; Server only listens). Workers read
//     all K addresses, connect, and run net/auth.h's mutual handshake (both
//     ends prove the job secret). A worker sends Hello (its rank, W, the
//     protocol version, whether frames carry MACs); the server checks W, the
//     rank and the MAC choice against its own; the first Hello's mode (sync or
//     async) and staleness bound S become the server's, and a later Hello
//     that asks for others is refused. The server answers Welcome (its rank,
//     mode, S) or Error. A second Hello for a rank is refused.
//  2. Pieces. Every worker cuts the same ordered tensor list into pieces of
//     at most HPCT_PS_PIECE_BYTES, keyed by (tensor, part), numbered
//     0..P-1, and gives each piece to the server that has the fewest bytes so
//     far (lowest rank on ties): every worker computes the same table. A
//     worker sends Register(piece, name, part, dtype, elements) to the piece's
//     server; in async mode rank 0's Register carries the initial values.
//     When all W have registered a piece the server answers Registered (in
//     async mode with the values it now holds, so every worker starts from
//     them). Registrations that disagree (name, part, dtype or elements)
//     get Error naming the tensor, the part and both workers' shapes, sent
//     to every worker; the server then fails.
//  3. Steps, sync mode. A worker pushes each piece (Push: piece, its step,
//     the gradient bytes) and waits for Reply frames; it pushes in piece
//     order with at most HPCT_PS_PUSH_WINDOW pieces unanswered (one per
//     server by default) and reads replies while it still writes, so both
//     directions of every connection stay busy and early sums come back
//     while later pieces go out. The server reads each push straight into
//     that worker's slot for the piece; when every active worker's slot is
//     full it sums the slots in worker-rank order (the same bits for every
//     worker and every run: sync PS matches allreduce's sum within rounding
//     only, because a ring adds in another order) and sends the sum with the
//     number of workers in it (Reply.count) to each of them. Workers divide.
//  4. Steps, async mode with bound S. A Push carries an update (new minus
//     old parameters, from the worker's own optimizer); the server adds
//     update / W to the piece's parameters at once and counts the worker's
//     pushes c_w. The worker's Reply (a copy of the parameters) is held until
//     min over active workers of c_v >= c_w - S: no worker completes a step
//     more than S steps ahead of the slowest. S = 0 gives lockstep.
//  5. Epoch end, uneven batch counts. A worker out of batches sends Leave.
//     It no longer counts (sync sums and async minimums go on without it),
//     and the server reads nothing more from it until every worker has left
//     (so an early worker's next epoch cannot mix with a late worker's
//     last steps). When all have left (or died) the epoch turns: the server
//     sends Left to each, in async mode followed by a Fetched frame per
//     piece with the parameters as they were at the turn (the same for all,
//     and what a checkpoint saves), resets the push counts, and reads again.
//  6. End and faults. Bye: the worker is done. A worker that closes without
//     Bye has died: in sync mode the server sends Error naming it (rank and
//     host) to every other worker and fails; in async mode it stops counting
//     it and the others go on (a warning names it). run() returns when no
//     worker remains. A server that dies or stalls is named by the workers
//     (ps/client.h), each within its timeout.
//
// State a checkpoint needs: in sync mode none (servers hold nothing between
// steps); in async mode the parameters, which every worker receives at the
// epoch turn and the trainer saves with the model. A restarted job registers
// again with rank 0's restored values.
//
// Threads: run() is one event loop (poll over the listening socket and every
// worker's connection) on the caller's thread; stop() may be called from any
// thread. Sums and copies happen in the loop while the kernel keeps
// receiving into the socket buffers.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>

#include "core/clock.h"
#include "core/fd.h"
#include "core/log.h"
#include "ps/protocol.h"

namespace hpct::ps {

struct ServerOptions {
  int rank = 0;  // among the servers
  int num_workers = 1;
  // The mode and staleness bound come from the workers' Hello (the first
  // one sets them; a worker that asks for others is refused by name), so a
  // server needs no training flags.
  std::string secret;
  std::string bind_address = "127.0.0.1";
  int port = 0;            // 0: ephemeral
  std::string host_name;   // reported in messages
  bool mac_frames = false; // HPCT_PS_FRAME_MAC: every frame carries an HMAC
  Millis handshake_timeout{10000};
  // A worker silent while the server waits for it (mid-frame, or every
  // worker silent with work pending) for this long fails the server.
  Millis idle_timeout{300000};
  std::uint64_t max_payload = std::uint64_t{1} << 31;
  Logger logger;
};

struct ServerSummary {
  std::uint64_t pushes = 0;
  std::uint64_t bytes_in = 0;
  int workers_bye = 0;
  int workers_died = 0;
  int epochs = 0;  // turns
};

class Server {
 public:
  // Binds and listens (InvalidArgument/Io naming the address on failure).
  explicit Server(ServerOptions options);
  ~Server();
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  int port() const;
  // Serves until every worker has said Bye or died. Raises the error that
  // failed the job (Mismatch for disagreeing registrations, PeerFailure for a
  // dead worker in sync mode, Timeout for silence) after telling every
  // connected worker. Call once.
  ServerSummary run();
  // Makes run() return (with a PeerFailure "stopped") within a poll slice;
  // thread-safe. Closes every worker connection, as a dying server would.
  void stop();

  struct State;

 private:
  std::unique_ptr<State> state_;
};

}  // namespace hpct::ps
