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
  // The store's host ("" for a directory store or none): where further Gloo
  // communicators of this job bind towards (connect_gloo's store_host).
  std::string store_host;
  std::unique_ptr<Communicator> comm;
};

World connect_world(const Config& config, const Env& env, const Logger& logger);

// The key prefix of this run of the job in its store ("<job id>/restart<n>"):
// a restarted job's keys never meet its earlier run's.
std::string job_store_prefix(const WorldInfo& world, const Env& env);

// The job's store as connect_world opens it (the launcher's TCP store, or
// HPCT_STORE_DIR), under job_store_prefix. Reads the secret from
// HPCT_SECRET_FD, which can be done once per process: a caller that makes
// several worlds (elastic/) keeps this store. *store_host: the store's host
// ("" for a directory), for choosing the address to bind.
std::shared_ptr<store::Store> open_job_store(const Config& config, const WorldInfo& world,
                                             const Env& env, std::string* store_host,
                                             const Logger& logger);

// A Gloo communicator for info.rank of info.size, meeting through `store`
// (a fresh namespace for this world: a PrefixStore), binding as
// connect_world does. timeout bounds the connect and is the ops' default.
std::unique_ptr<Communicator> connect_gloo(const Config& config, const WorldInfo& info,
                                           std::shared_ptr<store::Store> store,
                                           const std::string& store_host, Millis timeout,
                                           const Logger& logger);

// The local IP address the kernel would use to reach host (a UDP connect, no
// packet sent); "127.0.0.1" for loopback hosts. Io when host is unreachable.
std::string local_address_towards(const std::string& host);

}  // namespace hpct::comm
