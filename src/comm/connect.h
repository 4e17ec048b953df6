// From "a process started by some launcher" to "a rank with a communicator".
//
// connect_world() reads who this process is (core/world.h), picks the
// backend (HPCT_BACKEND: auto = MPI when an MPI launcher started us, Gloo
// otherwise), finds the rendezvous store Gloo needs (the launcher's TCP store
// from HPCT_STORE_ADDR with the secret from HPCT_SECRET_FD; in a Kubernetes
// Indexed Job, which has no launcher process, rank 0 serves that store
// itself at the address HPCT_STORE_ADDR names, its own pod; or a shared
// directory from HPCT_STORE_DIR, or none for one rank) and the address to
// bind, and connects. It blocks until every rank has joined or the timeout
// (HPCT_TIMEOUT_S) runs out, and every problem it can foresee is an
// InvalidArgument that says which variable to set.
#pragma once

#include <memory>
#include <string>

#include "comm/communicator.h"
#include "core/config.h"
#include "core/env.h"
#include "core/log.h"
#include "core/world.h"
#include "store/store.h"

namespace hpct::store {
class TcpStoreServer;
}  // namespace hpct::store

namespace hpct::comm {

enum class Backend { kAuto, kMpi, kGloo };

Backend parse_backend(const std::string& name);  // auto | mpi | gloo
const char* backend_name(Backend b);
// auto -> mpi when an MPI runtime started this process, gloo otherwise.
Backend resolve_backend(Backend requested, const WorldInfo& world);

struct World {
  // Rank 0 of a Kubernetes Indexed Job serves the job's store; first, so it
  // is destroyed last.
  std::shared_ptr<store::TcpStoreServer> store_server;
  WorldInfo info;
  std::shared_ptr<store::Store> store;  // null for MPI and for a single rank
  std::unique_ptr<Communicator> comm;
};

World connect_world(const Config& config, const Env& env, const Logger& logger);

// The local IP address the kernel would use to reach host (a UDP connect, no
// packet sent); "127.0.0.1" for loopback hosts. Io when host is unreachable.
std::string local_address_towards(const std::string& host);

}  // namespace hpct::comm
