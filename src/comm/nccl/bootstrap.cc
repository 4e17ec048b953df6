#include "comm/nccl/bootstrap.h"

#include <map>

#include "core/error.h"

namespace hpct::comm::nccl {

std::string bootstrap_key(const std::string& name, const std::string& what) {
  return "nccl/" + name + "/" + what;
}

std::vector<std::string> exchange_device_identities(store::Store& store, const std::string& name,
                                                    int rank, int size, const std::string& identity,
                                                    Millis timeout) {
  store.set(bootstrap_key(name, "device/" + std::to_string(rank)), identity);
  std::vector<std::string> keys;
  for (int r = 0; r < size; ++r) keys.push_back(bootstrap_key(name, "device/" + std::to_string(r)));
  const auto missing = store.missing(keys, timeout);
  if (!missing.empty()) {
    std::string ranks;
    for (const auto& k : missing) {
      ranks += (ranks.empty() ? "" : ", ") + k.substr(k.rfind('/') + 1);
    }
    throw_timeout("NCCL start-up of communicator '" + name + "' on rank " + std::to_string(rank) +
                  " of " + std::to_string(size) + ": ranks [" + ranks +
                  "] did not publish their GPU within " + std::to_string(timeout.count()) + " ms" +
                  store.where() + " (did they start, with the same store and name?)");
  }
  std::vector<std::string> ids;
  for (const auto& k : keys) ids.push_back(store.get(k, timeout));
  return ids;
}

std::string describe_shared_devices(const std::vector<std::string>& identities) {
  std::map<std::string, int> first;
  for (int r = 0; r < static_cast<int>(identities.size()); ++r) {
    const auto [it, fresh] = first.emplace(identities[r], r);
    if (!fresh) {
      return "ranks " + std::to_string(it->second) + " and " + std::to_string(r) + " share GPU " +
             identities[r];
    }
  }
  return {};
}

void publish_unique_id(store::Store& store, const std::string& name, const std::string& id) {
  store.set(bootstrap_key(name, "unique_id"), id);
}

std::string wait_unique_id(store::Store& store, const std::string& name, int rank, size_t id_bytes,
                           Millis timeout) {
  const std::string key = bootstrap_key(name, "unique_id");
  if (!store.missing({key}, timeout).empty()) {
    throw_timeout("NCCL start-up of communicator '" + name + "' on rank " + std::to_string(rank) +
                  ": rank 0 did not publish the NCCL unique id (store key '" + key + "') within " +
                  std::to_string(timeout.count()) + " ms" + store.where() +
                  " (is rank 0 running, with the same store and communicator name?)");
  }
  std::string id = store.get(key, timeout);
  if (id.size() != id_bytes) {
    throw_mismatch("NCCL start-up of communicator '" + name + "' on rank " + std::to_string(rank) +
                   ": rank 0's unique id has " + std::to_string(id.size()) +
                   " bytes, this rank's NCCL expects " + std::to_string(id_bytes) +
                   " (ranks built against different NCCL versions? install the same torch "
                   "everywhere)");
  }
  return id;
}

}  // namespace hpct::comm::nccl
