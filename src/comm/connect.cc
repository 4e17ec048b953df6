#include "comm/connect.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <map>
#include <mutex>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <thread>

#include "comm/gloo/communicator.h"
#include "comm/mpi/communicator.h"
#include "core/error.h"
#include "core/fd.h"
#include "store/file_store.h"
#include "store/memory_store.h"
#include "store/secret.h"
#include "store/tcp_store.h"

namespace hpct::comm {
namespace {

// "host:port" -> (host, port); InvalidArgument naming the variable otherwise.
std::pair<std::string, int> split_endpoint(const std::string& text) {
  auto colon = text.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == text.size()) {
    throw_invalid_argument("HPCT_STORE_ADDR=" + text + " is not host:port");
  }
  std::string host = text.substr(0, colon);
  if (host.size() > 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  char* end = nullptr;
  long port = std::strtol(text.c_str() + colon + 1, &end, 10);
  if (*end != '\0' || port <= 0 || port > 65535) {
    throw_invalid_argument("HPCT_STORE_ADDR=" + text + " has no valid port");
  }
  return {host, static_cast<int>(port)};
}

// The local address `host` names, retried until `timeout`: a pod's own DNS
// record (through a headless Service) appears a moment after the pod starts.
std::string own_address_named(const std::string& host, Millis timeout) {
  const auto until = std::chrono::steady_clock::now() + timeout;
  while (true) {
    try {
      return local_address_towards(host);
    } catch (const Error& e) {
      if (std::chrono::steady_clock::now() >= until) {
        throw Error(ErrorCode::kTimeout,
                    std::string(e.what()) + " (rank 0 of a Kubernetes Indexed Job serves the store at "
                    "HPCT_STORE_ADDR, which must name its own pod: <job>-0.<headless service>)");
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(500));
    }
  }
}

std::shared_ptr<store::Store> open_base_store(const Config& config, const WorldInfo& world,
                                              std::string* store_host,
                                              std::shared_ptr<store::TcpStoreServer>* server,
                                              const Logger& log) {
  const Millis timeout = seconds_to_millis(config.timeout_s);
  std::shared_ptr<store::Store> base;
  if (!config.store_addr.empty()) {
    if (config.secret_fd < 0) {
      throw_invalid_argument("HPCT_STORE_ADDR is set but HPCT_SECRET_FD is not: the job secret "
                             "is handed over by hpctrain launch on a file descriptor");
    }
    auto [host, port] = split_endpoint(config.store_addr);
    store::TcpStoreOptions o;
    o.host = host;
    o.port = port;
    o.secret = store::job_secret(static_cast<int>(config.secret_fd));
    if (world.launcher == Launcher::kKubernetes && world.rank == 0) {
      // No launcher process runs beside an Indexed Job's pods: rank 0 serves
      // the store, bound to its own address (HPCT_STORE_ADDR names rank 0's
      // pod), never 0.0.0.0; the others connect, retrying until it is up.
      store::TcpStoreServerOptions so;
      so.secret = o.secret;
      so.bind_address = own_address_named(host, timeout);
      so.port = port;
      so.max_frame_bytes = static_cast<size_t>(config.max_frame_bytes);
      so.logger = log;
      *server = std::make_shared<store::TcpStoreServer>(so);
    }
    o.connect_timeout = timeout;
    // A reply's own bound no longer than the job's (a rank cut off from
    // the launcher's host waits at most that per store call).
    o.io_timeout = std::min(o.io_timeout, timeout);
    o.max_frame_bytes = static_cast<size_t>(config.max_frame_bytes);
    *store_host = host;
    base = std::make_shared<store::TcpStore>(o);
  } else if (!config.store_dir.empty()) {
    base = std::make_shared<store::FileStore>(config.store_dir, timeout);
  } else if (world.size == 1) {
    base = std::make_shared<store::MemoryStore>();
  } else {
    throw_invalid_argument("rank " + std::to_string(world.rank) + " of " + std::to_string(world.size) +
                           " has no rendezvous store for Gloo: start the job with `hpctrain launch`, "
                           "or set HPCT_STORE_DIR to an empty directory every rank can see, or use "
                           "--backend mpi under mpirun");
  }
  return base;
}

std::shared_ptr<store::Store> open_store(const Config& config, const WorldInfo& world,
                                         const Env& env, std::string* store_host,
                                         std::shared_ptr<store::TcpStoreServer>* server,
                                         const Logger& log) {
  // Keys of a restarted job must not meet the keys of its earlier run, nor
  // those of this rank's earlier joins (every rank of a job that leaves
  // and joins again, as Horovod's init/shutdown/init, does so the same
  // number of times, so the counts agree). Counted per rank: ranks living
  // as threads of one process (tests, Kubernetes pods played by threads)
  // each join once.
  static std::mutex joins_mu;
  static std::map<int, int> joins;
  int join = 0;
  {
    std::lock_guard<std::mutex> lock(joins_mu);
    join = joins[world.rank]++;
  }
  std::string prefix = job_store_prefix(world, env);
  if (join > 0) prefix += "/join" + std::to_string(join);
  return std::make_shared<store::PrefixStore>(prefix, open_base_store(config, world, store_host, server, log));
}

}  // namespace

std::string job_store_prefix(const WorldInfo& world, const Env& env) {
  // Keys of a restarted job must not meet the keys of its earlier run.
  return env.get("HPCT_JOB_ID").value_or("job") + "/restart" + std::to_string(world.restart);
}

std::shared_ptr<store::Store> open_job_store(const Config& config, const WorldInfo& world,
                                             const Env& env, std::string* store_host,
                                             const Logger& logger) {
  std::shared_ptr<store::TcpStoreServer> server;
  WorldInfo w = world;
  if (w.launcher == Launcher::kKubernetes) w.launcher = Launcher::kHpctrain;  // never serve it here
  return std::make_shared<store::PrefixStore>(job_store_prefix(world, env),
                                              open_base_store(config, w, store_host, &server, logger));
}

Backend parse_backend(const std::string& name) {
  if (name == "auto") return Backend::kAuto;
  if (name == "mpi") return Backend::kMpi;
  if (name == "gloo") return Backend::kGloo;
  throw_invalid_argument("backend '" + name + "' is not one of auto, mpi, gloo");
}

const char* backend_name(Backend b) {
  switch (b) {
    case Backend::kAuto: return "auto";
    case Backend::kMpi: return "mpi";
    case Backend::kGloo: return "gloo";
  }
  return "?";
}

Backend resolve_backend(Backend requested, const WorldInfo& world) {
  if (requested != Backend::kAuto) return requested;
  return world.mpi_runtime ? Backend::kMpi : Backend::kGloo;
}

std::string local_address_towards(const std::string& host) {
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_DGRAM;
  addrinfo* res = nullptr;
  int rc = getaddrinfo(host.c_str(), "9", &hints, &res);
  if (rc != 0 || res == nullptr) {
    throw Error(ErrorCode::kIo, "cannot resolve store host '" + host + "': " + gai_strerror(rc));
  }
  UniqueFd fd(::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0));
  if (!fd.valid()) {
    freeaddrinfo(res);
    throw_io("socket", errno);
  }
  int c = ::connect(fd.get(), res->ai_addr, res->ai_addrlen);
  int err = errno;
  freeaddrinfo(res);
  if (c != 0) throw_io("no route from this host to store host '" + host + "'", err);
  sockaddr_in local{};
  socklen_t len = sizeof local;
  if (::getsockname(fd.get(), reinterpret_cast<sockaddr*>(&local), &len) != 0) {
    throw_io("getsockname", errno);
  }
  char buf[INET_ADDRSTRLEN];
  inet_ntop(AF_INET, &local.sin_addr, buf, sizeof buf);
  return buf;
}

std::unique_ptr<Communicator> connect_gloo(const Config& config, const WorldInfo& info,
                                           std::shared_ptr<store::Store> store,
                                           const std::string& store_host, Millis timeout,
                                           const Logger& log) {
  GlooOptions o;
  o.rank = info.rank;
  o.size = info.size;
  o.store = store;
  o.timeout = timeout;
  o.logger = log;
  o.shm = config.shm;
  o.shm_slot_bytes = static_cast<std::size_t>(config.shm_slot_bytes);
  if (config.direct_allreduce_bytes < 0) {
    throw_invalid_argument("HPCT_DIRECT_ALLREDUCE_BYTES must be 0 (off) or positive, got " +
                           std::to_string(config.direct_allreduce_bytes));
  }
  o.direct_allreduce_bytes = static_cast<std::size_t>(config.direct_allreduce_bytes);
  o.hierarchical = config.shm;  // shared memory within each host
  if (!config.bind_address.empty()) {
    o.address = config.bind_address;
  } else if (!config.network_interface.empty()) {
    o.address.clear();
    o.interface = config.network_interface;
  } else if (!store_host.empty()) {
    o.address = local_address_towards(store_host);
  } else if (info.cross_size > 1) {
    throw_invalid_argument("ranks run on " + std::to_string(info.cross_size) +
                           " hosts but no address to bind is known: set HPCT_NETWORK_INTERFACE "
                           "(e.g. eth0) or HPCT_BIND_ADDRESS");
  } else {
    o.address = "127.0.0.1";
  }
  log.debug("comm", std::string("connecting gloo world of ") + std::to_string(o.size) +
                        " ranks, binding " + (o.address.empty() ? o.interface : o.address));
  return GlooCommunicator::connect(o);
}

World connect_world(const Config& config, const Env& env, const Logger& logger) {
  World w;
  w.info = discover_world(env);
  const Millis timeout = seconds_to_millis(config.timeout_s);
  const Backend backend = resolve_backend(parse_backend(config.backend), w.info);
  if (config.shm_slot_bytes <= 0) {
    throw_invalid_argument("HPCT_SHM_SLOT_BYTES must be positive, got " +
                           std::to_string(config.shm_slot_bytes));
  }
  Logger log = logger.with_rank(w.info.rank);

  if (backend == Backend::kMpi) {
    MpiOptions o;
    o.default_timeout = timeout;
    o.logger = log;
    o.yield_when_idle = config.mpi_yield;
    o.shm = config.shm;
    o.shm_slot_bytes = static_cast<std::size_t>(config.shm_slot_bytes);
    auto mpi = MpiCommunicator::create(o);
    if (w.info.launcher != Launcher::kNone && mpi->size() != w.info.size) {
      throw_mismatch("MPI reports " + std::to_string(mpi->size()) + " ranks but " +
                     launcher_name(w.info.launcher) + " started " + std::to_string(w.info.size) +
                     "; start MPI jobs with mpirun (or hpctrain launch --spawner mpirun)");
    }
    w.info.rank = mpi->rank();
    w.info.size = mpi->size();
    w.comm = std::move(mpi);
    return w;
  }

  w.store = open_store(config, w.info, env, &w.store_host, &w.store_server, log);
  w.comm = connect_gloo(config, w.info, w.store, w.store_host, timeout, log);
  return w;
}

}  // namespace hpct::comm
