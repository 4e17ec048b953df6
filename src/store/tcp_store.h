// The job's rendezvous store over TCP: a server on the launcher (or rank 0)
// and a client in every rank, every message authenticated with the job
// secret (store/secret.h).
//
// Protocol, step by step (the handshake is net/auth.h's, the frames net/frame.h's):
//  1. The server listens on options.bind_address (loopback unless asked),
//     port 0 meaning an ephemeral port that port() reports. The launcher
//     passes host:port and the secret to the ranks.
//  2. A client connects, retrying with a backoff until connect_timeout: a
//     server that starts a little after its ranks is normal.
//  3. Mutual challenge: client and server exchange 32-byte nonces, the client
//     proves it holds the secret (HMAC over both nonces), then the server
//     does. A wrong client proof gets a refusal byte, then the server closes;
//     the client raises Auth "the job secret does not match: ...". Both sides
//     derive a session key from the secret and both nonces. The whole
//     handshake must finish within handshake_timeout of the accept, so a
//     client that connects and says nothing is dropped.
//  4. Requests and replies are frames (net/frame.h): a header led by the
//     payload length, the payload, and an HMAC under the session key over
//     direction, sequence number, header and payload. The server checks the
//     length against max_frame_bytes before it allocates anything, and
//     closes the connection on an oversize length, a failed MAC (replayed,
//     reordered, altered) or a malformed payload. Once a frame's first byte arrives the rest must follow within
//     io_timeout; between frames an authenticated client may stay idle.
//  5. One request at a time per connection; the reply carries Ok (with a
//     value or number), Timeout (with the keys still missing) or Error (a
//     code and a message). get and wait block on the server, in the
//     connection's own thread, up to the timeout the client sent (at most a
//     week); other clients are served meanwhile.
//  6. The client keeps a small pool of authenticated connections, one per
//     request in flight, so one thread's long wait does not hold up another
//     thread's set.
//
// Payload of a request or reply (tcp_wire::Message): kind (1) | key count (4)
// | each key as length (4) + bytes | value length (4) + bytes | number (8),
// integers big-endian. Request kinds are the Store methods (tcp_wire::Op),
// reply kinds are tcp_wire::Status.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "core/log.h"
#include "store/store.h"

namespace hpct::store {

// The payload codec, exposed so tests can speak the protocol over raw sockets.
namespace tcp_wire {

// kMissing waits up to `number` ms for keys and replies the ones still absent.
enum class Op : std::uint8_t { kSet = 1, kGet = 2, kAdd = 3, kMissing = 4, kRemove = 5 };
enum class Status : std::uint8_t { kOk = 100, kTimeout = 101, kError = 102 };

// A request (kind is an Op) or a reply (kind is a Status). Keys: the request's
// keys, or the keys a Timeout reply is still missing. Value: set's value,
// get's reply, an Error reply's message. Number: timeout in ms, add's delta
// and result, check/remove results, an Error reply's ErrorCode.
struct Message {
  std::uint8_t kind = 0;
  std::vector<std::string> keys;
  std::string value;
  std::int64_t number = 0;
};

std::string encode(const Message& m);
// DataCorrupt naming `from` when the bytes are not one whole Message.
Message decode(std::string_view bytes, const std::string& from);

}  // namespace tcp_wire

struct TcpStoreServerOptions {
  std::string secret;                      // the job secret; required, non-empty
  std::string bind_address = "127.0.0.1";  // never 0.0.0.0 unless asked for
  int port = 0;                            // 0: an ephemeral port, see port()
  size_t max_frame_bytes = 64u << 20;      // Config::max_frame_bytes
  Millis handshake_timeout{5000};          // from accept to authenticated
  Millis io_timeout{5000};                 // to finish a frame once it started, or to write a reply
  size_t max_connections = 1024;           // connections beyond this are closed at once
  Logger logger;                           // refused and dropped connections are logged at warn
};

// Counters for operators and tests. Monotonic except active_connections.
struct TcpStoreServerStats {
  std::uint64_t accepted = 0;             // connections accepted and served
  std::uint64_t refused_at_capacity = 0;  // closed at once: max_connections reached
  std::uint64_t authenticated = 0;        // handshakes that succeeded
  std::uint64_t auth_failures = 0;        // wrong secret
  std::uint64_t protocol_mismatches = 0;  // not this protocol (bad magic)
  std::uint64_t timed_out = 0;            // silent in the handshake, or stalled mid-frame
  std::uint64_t oversize_frames = 0;      // length prefix over max_frame_bytes
  std::uint64_t bad_macs = 0;             // replayed, reordered or altered frames
  std::uint64_t malformed_requests = 0;   // authenticated but unparseable
  std::uint64_t requests = 0;             // requests answered
  std::uint64_t active_connections = 0;
  size_t largest_frame_allocated = 0;  // largest payload buffer ever allocated for a frame
};

// Serves the Store operations to TcpStore clients, one thread per connection
// (jobs have at most hundreds of ranks; max_connections bounds the threads)
// plus one accepting thread. Owns its socket, threads and data.
class TcpStoreServer {
 public:
  // Binds and starts serving before it returns. InvalidArgument for an empty
  // secret or an unusable address; Io naming address:port when bind fails.
  explicit TcpStoreServer(TcpStoreServerOptions options);
  // Stops accepting, wakes every connection thread (including those blocked
  // in get/wait, whose clients see the connection close) and joins them.
  // Bounded: every wait in the server watches the stop signal.
  ~TcpStoreServer();
  TcpStoreServer(const TcpStoreServer&) = delete;
  TcpStoreServer& operator=(const TcpStoreServer&) = delete;

  // The bound port (the ephemeral one when options.port was 0).
  int port() const;
  const std::string& bind_address() const;
  // Thread-safe snapshot.
  TcpStoreServerStats stats() const;

  struct State;

 private:
  std::unique_ptr<State> state_;
};

struct TcpStoreOptions {
  std::string host = "127.0.0.1";
  int port = 0;
  std::string secret;  // the job secret; required, non-empty
  Millis connect_timeout{
      60000};                // retry connecting until this runs out, then Timeout naming host:port
  Millis io_timeout{30000};  // a reply's time beyond any wait the request asked for
  size_t max_frame_bytes = 64u << 20;  // Config::max_frame_bytes
};

// A Store whose data lives in a TcpStoreServer. Thread-safe: concurrent
// calls use separate connections. Raises Auth when the secret does not
// match, Timeout naming host:port when it cannot connect in time, Timeout
// naming the keys when get/wait run out, PeerFailure when the server goes
// away mid-request (requests are not retried: add is not idempotent).
class TcpStore final : public Store {
 public:
  // Connects and authenticates before it returns (blocks up to
  // connect_timeout).
  explicit TcpStore(TcpStoreOptions options);
  ~TcpStore() override;
  TcpStore(const TcpStore&) = delete;
  TcpStore& operator=(const TcpStore&) = delete;

  void set(const std::string& key, const std::string& value) override;
  std::string get(const std::string& key, Millis timeout) override;
  std::int64_t add(const std::string& key, std::int64_t delta) override;
  std::vector<std::string> missing(const std::vector<std::string>& keys, Millis timeout) override;
  bool remove(const std::string& key) override;

  // "host:port", as error messages name the server.
  const std::string& endpoint() const { return endpoint_; }
  std::string where() const override;  // " at the store host:port"
  void set_by(const std::string& key, const std::string& value, const Deadline& deadline) override;
  std::optional<std::string> peek_by(const std::string& key, const Deadline& deadline) override;

 private:
  struct Connection;
  // Sends request on a pooled connection and returns the server's reply as
  // it came (Ok, Timeout or Error). wait_budget: how long the server may
  // block. Connecting, sending and the reply each have their own bound
  // (connect_timeout, io_timeout), and all end by `until`: Timeout (or
  // PeerFailure, the server gone) naming op and the store.
  tcp_wire::Message exchange(const tcp_wire::Message& request, Millis wait_budget,
                             const std::string& op, SteadyClock::time_point until);
  // exchange, then the reply's Timeout or Error raised.
  tcp_wire::Message call(const tcp_wire::Message& request, Millis wait_budget,
                         const std::string& op,
                         SteadyClock::time_point until = SteadyClock::time_point::max());
  tcp_wire::Message checked(const tcp_wire::Message& reply, const tcp_wire::Message& request,
                            Millis wait_budget, const std::string& op) const;
  std::unique_ptr<Connection> connect_with_retry(Millis budget);
  std::unique_ptr<Connection> connect_once(SteadyClock::time_point until);

  const TcpStoreOptions options_;
  const std::string endpoint_;
  std::mutex pool_mu_;
  std::vector<std::unique_ptr<Connection>> idle_;  // guarded by pool_mu_
};

}  // namespace hpct::store
