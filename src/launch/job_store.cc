#include "launch/job_store.h"

#include "comm/connect.h"
#include "launch/hostfile.h"
#include "store/secret.h"

namespace hpct::launch {

JobStore::JobStore(const std::string& bind_address, size_t max_frame_bytes, const Logger& logger)
    : secret_(store::generate_secret()) {
  store::TcpStoreServerOptions o;
  o.secret = secret_;
  o.bind_address = bind_address;
  o.max_frame_bytes = max_frame_bytes;
  o.logger = logger;
  server_ = std::make_unique<store::TcpStoreServer>(o);
}

std::string JobStore::address() const {
  return server_->bind_address() + ":" + std::to_string(server_->port());
}

std::string choose_store_address(const std::string& network_interface,
                                 const std::vector<std::string>& remote_hosts) {
  if (!network_interface.empty()) return interface_address(network_interface);
  if (remote_hosts.empty()) return "127.0.0.1";
  return comm::local_address_towards(remote_hosts.front());
}

}  // namespace hpct::launch
