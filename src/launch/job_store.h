// The job's rendezvous store, served by the launcher: an authenticated
// TcpStoreServer (store/tcp_store.h) with a fresh per-job secret, bound to
// the one address the ranks can reach (loopback for a job on this machine),
// never 0.0.0.0. It outlives restarts: each restart's keys live under their
// own prefix (comm/connect.cc), so a restarted job never meets stale keys.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "core/log.h"
#include "store/tcp_store.h"

namespace hpct::launch {

class JobStore {
 public:
  // Starts serving before it returns; Io naming the address when bind fails.
  JobStore(const std::string& bind_address, size_t max_frame_bytes, const Logger& logger);
  JobStore(const JobStore&) = delete;
  JobStore& operator=(const JobStore&) = delete;

  const std::string& secret() const { return secret_; }
  std::string address() const;  // "10.77.0.254:41234"

 private:
  std::string secret_;
  std::unique_ptr<store::TcpStoreServer> server_;
};

// The address the store binds to: the interface's when one is named, else
// loopback when every host is this machine, else the local address that
// routes to the first remote host. Io when no route exists.
std::string choose_store_address(const std::string& network_interface,
                                 const std::vector<std::string>& remote_hosts);

}  // namespace hpct::launch
