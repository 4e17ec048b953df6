// The data server: a head node streams each rank its share of an epoch over
// TCP, so compute nodes need no copy of the shards.
//
// Protocol, step by step (messages in data_wire.h, handshake and frames in
// net/auth.h and net/frame.h, the accept loop net/connection_server.h):
//  1. The server indexes its shards (shard_index.h) and listens on
//     bind_address:port (loopback unless asked; never 0.0.0.0 by default).
//  2. A client connects and both sides run net/auth.h's mutual HMAC
//     handshake with the job secret; a wrong secret is refused (Auth). Every
//     later message is a MAC-sealed frame with implicit sequence numbers, its
//     length checked before anything is allocated.
//  3. The client sends Open: rank, size, seed, epoch, the split options and
//     `start`, the position in its epoch to stream from (0 for a new epoch;
//     the count it already holds when it reconnects).
//  4. The server computes that rank's plan for the epoch exactly as a local
//     Loader would (sampler.h: same split, same shuffle) and replies Header:
//     the rank's sample count, padding, and the dataset fingerprint; or
//     Error (a code and a message) for a bad request.
//  5. The server streams Chunks, each up to chunk_samples samples in plan
//     order with the position of the first. Samples are raw fields, or, with
//     decode on, pixels and labels (a sample that does not decode carries its
//     error; the client's on_error policy decides). A producer thread per
//     stream reads (and decodes) into a queue of at most queue_chunks chunks;
//     the connection thread sends them. A client that stops reading stalls
//     the producer (TCP and the bounded queue are the backpressure), and is
//     dropped after send_timeout.
//  6. After the last sample the server sends End with the total, and the
//     client closes. One connection carries one stream (one rank, one
//     epoch); ranks of a job each hold their own.
//  7. When the server dies the client reconnects (bounded attempts, backoff)
//     and reopens at its count: the plan is a pure function of the request,
//     so a restarted server resumes the same sequence, losing and repeating
//     nothing.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/clock.h"
#include "core/log.h"
#include "data/decode/fields.h"
#include "data/source/file.h"
#include "data/sample.h"

namespace hpct::data {

class ShardIndex;

struct DataServerOptions {
  std::vector<std::string> shards;        // expanded shard paths
  std::string secret;                     // the job secret; required, non-empty
  std::string bind_address = "127.0.0.1";
  int port = 0;                           // 0: ephemeral, see port()
  bool decode = false;                    // send decoded images and labels
  FieldOptions fields;                    // for decode
  OnError on_error = OnError::kFail;      // for damaged shards while indexing
  size_t chunk_samples = 64;
  size_t queue_chunks = 8;                // per stream: the send queue's bound
  size_t max_frame_bytes = 64u << 20;
  size_t max_connections = 256;
  Millis handshake_timeout{5000};
  Millis io_timeout{10000};               // to finish a frame once started
  Millis send_timeout{600000};            // a client may stop reading this long
  std::shared_ptr<FileSystem> fs = default_file_system();  // local paths and URLs
  Logger logger;
};

struct DataServerStats {
  std::uint64_t accepted = 0;
  std::uint64_t auth_failures = 0;
  std::uint64_t streams_opened = 0;
  std::uint64_t streams_finished = 0;   // sent End
  std::uint64_t samples_sent = 0;
  std::uint64_t active_connections = 0;
  size_t largest_queue = 0;             // most chunks ever queued for one stream
};

// Owns its socket, threads and index. Thread-safe accessors.
class DataServer {
 public:
  // Indexes the shards (blocks on disk), binds and starts serving before it
  // returns. InvalidArgument for an empty secret; Io when bind fails;
  // DataCorrupt for damaged shards with on_error fail.
  explicit DataServer(DataServerOptions options);
  // Stops accepting, wakes and joins every stream (bounded).
  ~DataServer();
  DataServer(const DataServer&) = delete;
  DataServer& operator=(const DataServer&) = delete;

  int port() const;
  const ShardIndex& index() const;
  DataServerStats stats() const;

  struct State;

 private:
  std::unique_ptr<State> state_;
};

}  // namespace hpct::data
