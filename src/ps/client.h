// A worker's end of the parameter servers (protocol: ps/server.h): connects
// to every server, cuts the worker's tensors into pieces and pushes and pulls
// them, every direction of every connection at once, from the caller's
// thread with one poll() loop and no copies (payloads go from the caller's
// buffers to the socket and from the socket into the caller's buffers).
//
// Every wait is bounded by ClientOptions::timeout and a failure names the
// server's rank, host and address ("parameter server 1 on h2
// (10.0.0.2:41234) closed the connection"). Not thread-safe: one training
// thread uses a Client.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/clock.h"
#include "ps/protocol.h"

namespace hpct::ps {

struct ServerAddress {
  int rank = 0;
  std::string host_name;  // for messages: the host it runs on
  std::string address;    // to connect to
  int port = 0;
};

struct ClientOptions {
  int rank = 0;  // this worker
  int num_workers = 1;
  std::vector<ServerAddress> servers;  // by server rank
  std::string secret;
  std::string host_name;  // this worker's host, for the servers' messages
  bool mac_frames = false;
  Mode mode = Mode::kSync;
  int staleness = 0;  // async: S, how many steps a worker may complete ahead of the slowest
  std::uint64_t piece_bytes = 4 << 20;
  // Pieces pushed and not yet answered at once, in piece order (0: one per
  // server; -1: every piece at once). HPCT_PS_PUSH_WINDOW; docs/ps.md.
  int push_window = 0;
  Millis timeout{300000};          // no progress from a server with work pending
  Millis connect_timeout{30000};   // servers that start later than workers are normal
  std::uint64_t max_payload = std::uint64_t{1} << 31;
};

struct TensorSpec {
  std::string name;
  DataType dtype = DataType::kFloat32;
  std::uint64_t elements = 0;
};

// One piece of one tensor, and its server.
struct PieceInfo {
  std::uint32_t id = 0;
  int tensor = 0;
  std::uint32_t part = 0;
  std::uint64_t offset_bytes = 0;  // within the tensor
  std::uint64_t bytes = 0;
  int server = 0;
};

// The same table on every worker: tensors in order, parts of at most
// piece_bytes (whole elements), each to the server with the fewest bytes so
// far (lowest rank on ties).
std::vector<PieceInfo> plan_pieces(const std::vector<TensorSpec>& tensors,
                                   std::uint64_t piece_bytes, int num_servers);

class Client {
 public:
  // Connects to every server (retrying until connect_timeout), handshakes,
  // says Hello. Mismatch when the servers disagree on the mode or refuse.
  explicit Client(ClientOptions options);
  // Says Bye to every server (best effort, bounded), unless an operation
  // failed or an exception is unwinding: then it only closes, and the
  // servers see a worker that died (sync mode: the others are told).
  ~Client();
  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;

  Mode mode() const { return mode_; }
  int staleness() const { return staleness_; }
  const std::vector<PieceInfo>& pieces() const { return pieces_; }

  // Registers the tensors (same names, dtypes and sizes in the same order on
  // every worker; Mismatch naming the tensor, part and both workers'
  // shapes otherwise). Async mode: worker 0's values[i] are the initial
  // parameters, and every worker's values[i] receive what the servers hold.
  // Sync mode: values may be empty. Blocks until every worker registered.
  void register_tensors(const std::vector<TensorSpec>& tensors, const std::vector<void*>& values);

  // One step. Sync: out[i] = the sum over the active workers of in[i]
  // (summed in worker order on the servers: the same bits on every worker);
  // returns how many workers were summed. Async: in[i] is this worker's
  // update (new minus old parameters); out[i] receives the servers'
  // parameters once no worker is more than the staleness bound behind;
  // returns 1. in[i] and out[i] may be the same buffer.
  int exchange(const std::vector<const void*>& in, const std::vector<void*>& out);

  // No more steps this epoch: returns when every worker has left (a
  // barrier). Async mode: params[i] receive the parameters at that moment,
  // the same on every worker.
  void leave(const std::vector<void*>& params);

  std::uint64_t steps() const { return steps_; }

  // Closes every connection without Bye, as a killed worker's would close
  // (fault tests and drills); the Client is unusable afterwards.
  void drop_connections() { links_.clear(); }

 private:
  struct Expect {
    Kind kind;
    int remaining;
  };
  // Runs the poll loop until every server's expected frames arrived.
  // land(server, header) places a payload; what names the operation.
  // feed() runs before every poll and may queue more frames.
  template <typename LandFn>
  void run_until(std::vector<int> remaining, LandFn&& land, const std::string& what);
  template <typename LandFn, typename FeedFn>
  void run_until(std::vector<int> remaining, LandFn&& land, const std::string& what, FeedFn&& feed);
  std::string server_name(int s) const;

  ClientOptions options_;
  std::vector<std::unique_ptr<Link>> links_;
  Mode mode_ = Mode::kSync;
  int staleness_ = 0;
  std::vector<TensorSpec> tensors_;
  std::vector<PieceInfo> pieces_;
  std::uint64_t steps_ = 0;
  int last_count_ = 0;
  bool failed_ = false;
};

}  // namespace hpct::ps
