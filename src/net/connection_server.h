// The accept loop of hpctrain's thread-per-connection servers (the job
// store, the data server): a listening socket, one accepting thread, one
// thread per connection up to max_connections, a stop signal every wait in
// a connection watches, and the counters operators read.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "core/fd.h"
#include "core/log.h"

namespace hpct::net {

struct ConnectionServerOptions {
  std::string who;                         // "TCP store server", in messages
  std::string peer_kind;                   // "store client": peers are named "<kind> <addr>"
  const char* log_subsystem = "net";       // a string literal: refusals are logged here at warn
  std::string bind_address = "127.0.0.1";  // never 0.0.0.0 unless asked for
  int port = 0;                            // 0: an ephemeral port, see port()
  size_t max_connections = 1024;           // connections beyond this are closed at once
  Logger logger;
};

// Monotonic except active_connections.
struct ConnectionCounts {
  std::uint64_t accepted = 0;             // connections accepted and handed to a thread
  std::uint64_t refused_at_capacity = 0;  // closed at once: max_connections, or no thread
  std::uint64_t active_connections = 0;
};

// Owns its socket and threads. handle(fd, peer, wake_fd) runs on the
// connection's own thread and owns fd (non-blocking, TCP_NODELAY); it should
// pass wake_fd to every wait so that stop() ends it promptly.
class ConnectionServer {
 public:
  using Handler = std::function<void(UniqueFd fd, const std::string& peer, int wake_fd)>;

  // Binds (Io naming who and address:port on failure, InvalidArgument for an
  // address that does not resolve or max_connections 0) and starts accepting
  // before it returns.
  ConnectionServer(ConnectionServerOptions options, Handler handle);
  // stop().
  ~ConnectionServer();
  ConnectionServer(const ConnectionServer&) = delete;
  ConnectionServer& operator=(const ConnectionServer&) = delete;

  // Stops accepting, makes wake_fd() readable for good, and joins the
  // accepting thread and every connection thread. Idempotent; bounded when
  // every handler watches wake_fd().
  void stop();

  int port() const { return port_; }
  const std::string& bind_address() const { return options_.bind_address; }
  // Readable once stop() began (an eventfd, never read).
  int wake_fd() const { return wake_fd_.get(); }
  // Thread-safe snapshot.
  ConnectionCounts counts() const;

 private:
  void accept_loop();
  void join_finished();
  void start(UniqueFd fd, const std::string& peer);

  const ConnectionServerOptions options_;
  const Handler handle_;
  UniqueFd listen_fd_;
  UniqueFd wake_fd_;
  int port_ = 0;
  std::thread acceptor_;
  std::once_flag stopped_;

  mutable std::mutex mu_;
  std::map<std::uint64_t, std::thread> connections_;  // guarded by mu_
  std::vector<std::uint64_t> finished_;               // guarded by mu_: threads to join
  size_t active_ = 0;                                 // guarded by mu_
  std::uint64_t next_id_ = 0;                         // accepting thread only
  std::atomic<std::uint64_t> accepted_{0}, refused_{0};
};

}  // namespace hpct::net
