#include "net/connection_server.h"

#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "core/error.h"
#include "net/socket.h"

namespace hpct::net {

ConnectionServer::ConnectionServer(ConnectionServerOptions options, Handler handle)
    : options_(std::move(options)), handle_(std::move(handle)) {
  if (options_.max_connections == 0) {
    throw_invalid_argument(options_.who + " on " + options_.bind_address + ":" +
                           std::to_string(options_.port) + ": max_connections is 0");
  }
  listen_fd_ = listen_tcp(options_.bind_address, options_.port, &port_, options_.who);
  wake_fd_.reset(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  if (!wake_fd_.valid()) throw_io(options_.who + ": eventfd", errno);
  acceptor_ = std::thread([this] { accept_loop(); });
}

ConnectionServer::~ConnectionServer() { stop(); }

void ConnectionServer::stop() {
  std::call_once(stopped_, [this] {
    std::uint64_t one = 1;
    [[maybe_unused]] ssize_t n = ::write(wake_fd_.get(), &one, sizeof one);
    acceptor_.join();
    std::map<std::uint64_t, std::thread> connections;
    {
      std::lock_guard<std::mutex> lock(mu_);
      connections.swap(connections_);
    }
    for (auto& [id, t] : connections) t.join();
  });
}

ConnectionCounts ConnectionServer::counts() const {
  ConnectionCounts out;
  out.accepted = accepted_;
  out.refused_at_capacity = refused_;
  std::lock_guard<std::mutex> lock(mu_);
  out.active_connections = active_;
  return out;
}

void ConnectionServer::join_finished() {
  std::vector<std::thread> done;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto id : finished_) {
      auto it = connections_.find(id);
      if (it == connections_.end()) continue;
      done.push_back(std::move(it->second));
      connections_.erase(it);
    }
    finished_.clear();
  }
  for (auto& t : done) t.join();
}

void ConnectionServer::accept_loop() {
  const char* sub = options_.log_subsystem;
  while (true) {
    join_finished();
    pollfd fds[2] = {{listen_fd_.get(), POLLIN, 0}, {wake_fd_.get(), POLLIN, 0}};
    int ready = ::poll(fds, 2, 1000);
    if (ready < 0 && errno != EINTR) {
      options_.logger.error(sub, options_.who + ": poll: " + std::strerror(errno));
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
      continue;
    }
    if (fds[1].revents != 0) return;
    if (ready <= 0 || fds[0].revents == 0) continue;

    sockaddr_storage peer_addr{};
    socklen_t len = sizeof peer_addr;
    UniqueFd fd(::accept4(listen_fd_.get(), reinterpret_cast<sockaddr*>(&peer_addr), &len,
                          SOCK_NONBLOCK | SOCK_CLOEXEC));
    if (!fd.valid()) {
      if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
        options_.logger.warn(sub, options_.who + ": accept: " + std::strerror(errno));
        std::this_thread::sleep_for(std::chrono::milliseconds(10));  // out of descriptors
      }
      continue;
    }
    start(std::move(fd),
          options_.peer_kind + " " + address_of(reinterpret_cast<sockaddr*>(&peer_addr)));
  }
}

void ConnectionServer::start(UniqueFd fd, const std::string& peer) {
  const char* sub = options_.log_subsystem;
  std::lock_guard<std::mutex> lock(mu_);
  if (active_ >= options_.max_connections) {
    ++refused_;
    options_.logger.warn(sub, "refused " + peer + ": " + std::to_string(active_) +
                                  " connections are open (max_connections)");
    return;  // fd closes here
  }
  set_nodelay(fd.get());
  const std::uint64_t id = next_id_++;
  try {
    // mu_ is held: a thread that ends at once registers as finished only
    // after it is in connections_.
    std::thread t([this, id, f = fd.get(), peer] {
      try {
        handle_(UniqueFd(f), peer, wake_fd_.get());
      } catch (const std::exception& e) {
        options_.logger.error(options_.log_subsystem, "dropping " + peer + ": " + e.what());
      } catch (...) {
        // Woken or another non-error: the connection ends either way.
      }
      std::lock_guard<std::mutex> lock(mu_);
      --active_;
      finished_.push_back(id);
    });
    fd.release();
    connections_.emplace(id, std::move(t));
    ++active_;
    ++accepted_;
  } catch (const std::system_error& e) {
    ++refused_;
    options_.logger.warn(sub, "refused " + peer + ": cannot start a thread: " + e.what());
  }
}

}  // namespace hpct::net
