// The one place where every hpctrain tunable is declared.
//
// Each entry has a type, a default and one line of doc. Values come from the
// environment (HPCT_*) and may be overridden by command-line flags
// (--timeout-s for HPCT_TIMEOUT_S). `hpctrain config` and --verbose print
// the effective values with where each came from. Nothing else in hpctrain
// reads HPCT_* variables.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "core/env.h"

namespace hpct {

// X(type, field, ENV_NAME, default, doc)
#define HPCT_CONFIG_PARAMS(X)                                                                   \
  X(double, timeout_s, "HPCT_TIMEOUT_S", 300.0,                                                 \
    "Seconds a communication operation or store wait may take before it raises Timeout")        \
  X(std::string, backend, "HPCT_BACKEND", "auto",                                               \
    "Communication backend: auto (MPI under mpirun/srun with MPI, Gloo otherwise), mpi, gloo")   \
  X(std::string, network_interface, "HPCT_NETWORK_INTERFACE", "",                               \
    "Interface Gloo binds to, e.g. eth0 (empty: the address that reaches the store, or lo)")    \
  X(std::string, bind_address, "HPCT_BIND_ADDRESS", "",                                         \
    "IP address Gloo binds to; overrides HPCT_NETWORK_INTERFACE")                               \
  X(std::string, store_addr, "HPCT_STORE_ADDR", "",                                             \
    "host:port of the job's authenticated TCP store (set by hpctrain launch)")                  \
  X(std::string, store_dir, "HPCT_STORE_DIR", "",                                               \
    "Directory of a file store shared by every rank, used when no HPCT_STORE_ADDR is given")    \
  X(std::int64_t, secret_fd, "HPCT_SECRET_FD", -1,                                              \
    "File descriptor the job secret is read from (set by hpctrain launch; never argv or env)")   \
  X(std::int64_t, max_frame_bytes, "HPCT_MAX_FRAME_BYTES", 64 << 20,                            \
    "Largest message the TCP store accepts; larger length prefixes are refused unread")         \
  X(std::string, log_level, "HPCT_LOG_LEVEL", "info",                                           \
    "Least severe log level printed: error, warn, info, debug, trace")                          \
  X(std::string, log_subsystems, "HPCT_LOG_SUBSYSTEMS", "all",                                  \
    "Comma-separated subsystems to log (core,store,comm,engine,...) or all")                    \
  X(double, launch_grace_s, "HPCT_LAUNCH_GRACE_S", 3.0,                                        \
    "launch: seconds between SIGTERM and SIGKILL when a job's ranks are stopped")               \
  X(double, launch_start_timeout_s, "HPCT_LAUNCH_START_TIMEOUT_S", 30.0,                        \
    "launch: seconds every rank has to start (ssh connect included) before the job fails")     \
  X(std::int64_t, data_threads, "HPCT_DATA_THREADS", 2,                                         \
    "data: decode threads per loader")                                                          \
  X(std::int64_t, data_prefetch, "HPCT_DATA_PREFETCH", 4,                                       \
    "data: batches a loader decodes ahead of the training loop (bounds its memory)")            \
  X(std::int64_t, data_shuffle_buffer, "HPCT_DATA_SHUFFLE_BUFFER", 1000,                        \
    "data: samples held by the shuffle buffer (1: read in plan order)")                         \
  X(std::string, data_on_error, "HPCT_DATA_ON_ERROR", "fail",                                   \
    "data: a damaged shard or sample fails the run (fail) or is skipped and counted (skip)")    \
  X(bool, data_idle_priority, "HPCT_DATA_IDLE_PRIORITY", true,                                \
    "data: decode threads run at idle priority (SCHED_IDLE), in the cores' idle time, instead " \
    "of preempting the ranks' compute (docs/data.md)")                                          \
  X(std::int64_t, data_reconnects, "HPCT_DATA_RECONNECTS", 10,                                  \
    "data: attempts a data server client makes to reconnect before it gives up")                \
  X(std::int64_t, data_fetches, "HPCT_DATA_FETCHES", 4,                                        \
    "data: remote shards (http, https, s3) a rank downloads at once, ahead of reading them")    \
  X(bool, data_sidecars, "HPCT_DATA_SIDECARS", true,                                           \
    "data: look for a remote shard's sidecar index (<shard>.idx) and plan the epoch from it, "  \
    "so shards stream as they are read (0: read every remote shard whole first)")              \
  X(std::int64_t, data_fetch_attempts, "HPCT_DATA_FETCH_ATTEMPTS", 10,                          \
    "data: requests per remote shard (first try, resumes after a cut, retries after a 5xx or "  \
    "a timeout) before the shard fails")                                                         \
  X(double, data_fetch_timeout_s, "HPCT_DATA_FETCH_TIMEOUT_S", 20.0,                            \
    "data: seconds a remote request may take to connect, or go without a byte, before it is "   \
    "retried")                                                                                   \
  X(std::string, data_ca_file, "HPCT_DATA_CA_FILE", "",                                         \
    "data: PEM file of the CAs https:// and s3:// servers are verified against (empty: the "    \
    "system store)")                                                                             \
  X(std::string, data_cache_dir, "HPCT_DATA_CACHE_DIR", "",                                     \
    "data: directory where whole remote shards are kept between epochs and runs, shared by "    \
    "a host's ranks (empty: no cache)")                                                          \
  X(std::string, data_cache_size, "HPCT_DATA_CACHE_SIZE", "10G",                                \
    "data: most bytes the shard cache holds; least recently used shards are dropped first")     \
  X(std::string, data_spool_memory, "HPCT_DATA_SPOOL_MEMORY", "1G",                            \
    "data: most bytes of remote shards a process holds in memory while they stream; further "  \
    "shards spool to an unlinked file in the temporary directory")                              \
  X(bool, mpi_yield, "HPCT_MPI_YIELD", true,                                                    \
    "Let MPI yield the core while it waits (mpi_yield_when_idle); spinning starves 2-core ranks") \
  X(bool, shm, "HPCT_SHM", true,                                                               \
    "MPI backend: when every rank is on this host, every allreduce goes through shared "        \
    "memory instead of MPI_Allreduce (3-5x faster here; docs/comm.md)")                         \
  X(std::int64_t, shm_slot_bytes, "HPCT_SHM_SLOT_BYTES", 4 << 20,                               \
    "MPI backend: each rank's shared-memory slot; an allreduce moves in equal pieces of at most half of it")  \
  X(std::int64_t, direct_allreduce_bytes, "HPCT_DIRECT_ALLREDUCE_BYTES", 64 << 10,              \
    "Gloo backend across hosts: allreduces of at most this many bytes (of any size with 2 "    \
    "ranks) go over hpctrain's own TCP connections by recursive doubling, not Gloo's ring "     \
    "(0: off; docs/comm.md)")                                                                   \
  X(std::string, gpu_path, "HPCT_GPU_PATH", "auto",                                             \
    "CUDA buffers between ranks: auto, nccl, hierarchical or staged (through pinned host memory; docs/comm.md)") \
  X(std::int64_t, mmap_threshold, "HPCT_MMAP_THRESHOLD", 32 << 20,                              \
    "hpct::init: glibc keeps freed blocks up to this size for reuse (mallopt) instead of "      \
    "unmapping them, so a step's tensors are not faulted in again every step (0: glibc default)") \
  X(std::string, overlap, "HPCT_OVERLAP", "auto",                                               \
    "DistributedOptimizer: allreduce gradients during backward (on) or all in step() (off); "   \
    "auto: off when this host's ranks' compute threads fill every core (docs/engine.md)")        \
  X(std::int64_t, fusion_bytes, "HPCT_FUSION_BYTES", 64 << 20,                                  \
    "Engine: most bytes of ready tensors packed into one allreduce (docs/engine.md)")          \
  X(double, cycle_ms, "HPCT_CYCLE_MS", 5.0,                                                     \
    "Engine: least time between negotiation rounds while tensors are pending (docs/engine.md)") \
  X(std::int64_t, cache_capacity, "HPCT_CACHE_CAPACITY", 1024,                                  \
    "Engine: tensors remembered by the response cache that skips negotiation (0: no cache)")  \
  X(double, stall_warn_s, "HPCT_STALL_WARN_S", 60.0,                                            \
    "Engine: warn when a tensor is submitted by some ranks but not others for this long")      \
  X(double, stall_abort_s, "HPCT_STALL_ABORT_S", -1.0,                                          \
    "Engine: fail such a tensor with Timeout on every rank that submitted it after this long " \
    "(-1: HPCT_TIMEOUT_S; 0: never, only warn)")                                                \
  X(double, straggler_window_s, "HPCT_STRAGGLER_WINDOW_S", 20.0,                                \
    "Engine: seconds over which the ranks compare how long each waited for the others; a rank " \
    "persistently slower than the median is named (0: off; docs/why.md)")                       \
  X(double, straggler_margin, "HPCT_STRAGGLER_MARGIN", 0.2,                                     \
    "Engine: a rank is named the straggler when its work is this much above the median rank's") \
  X(std::int64_t, straggler_min_waits, "HPCT_STRAGGLER_MIN_WAITS", 10,                          \
    "Engine: least waits for collectives per rank in a straggler window before it is judged")   \
  X(std::int64_t, metrics_port, "HPCT_METRICS_PORT", 0,                                        \
    "Prometheus /metrics of each rank on this port + its local rank (0: off; hpctrain launch "  \
    "--metrics-port sets it; docs/metrics.md)")                                                 \
  X(std::string, timeline, "HPCT_TIMELINE", "",                                                 \
    "Engine: rank 0 writes a Chrome-trace JSON of every tensor's phases to this file")         \
  X(std::int64_t, flight_record_entries, "HPCT_FLIGHT_RECORD_ENTRIES", 2000,                    \
    "Engine: recent operations each rank keeps in its flight record, written to "              \
    "HPCT_JOB_DIR/flight when the job fails (0: off; docs/why.md)")                            \
  X(std::string, job_dir, "HPCT_JOB_DIR", "",                                                   \
    "Directory of the job's records, shared by its hosts: flight records on failure, read by " \
    "hpctrain why (set by hpctrain launch; empty: none written)")                              \
  X(std::string, compression, "HPCT_COMPRESSION", "auto",                                       \
    "Engine: wire type of float32 allreduces: none, fp16, bf16, or auto (fp16 only where the "  \
    "job measured it faster: never in shared memory; docs/engine.md); lossy, with error "        \
    "feedback: powersgd[:RANK] or int8 (docs/compression.md)")                                  \
  X(bool, allow_lossy, "HPCT_ALLOW_LOSSY", false,                                               \
    "compression auto may also pick the lossy modes (powersgd, int8; docs/compression.md)")    \
  X(std::int64_t, compression_start_step, "HPCT_COMPRESSION_START_STEP", 50,                    \
    "Lossy compression: steps of plain allreduce before it starts (docs/compression.md)")     \
  X(double, compression_min_rate, "HPCT_COMPRESSION_MIN_RATE", 2.0,                             \
    "Lossy compression: a tensor whose bytes it would cut by less than this goes uncompressed") \
  X(std::string, sync, "HPCT_SYNC", "allreduce",                                                \
    "DistributedOptimizer: allreduce, ps (parameter servers sum gradients, lockstep) or "       \
    "ps-async (servers hold the parameters, bounded staleness); ps modes need launch --servers") \
  X(std::int64_t, ps_staleness, "HPCT_PS_STALENESS", 2,                                         \
    "ps-async: steps a worker may complete ahead of the slowest (0: lockstep; docs/ps.md)")    \
  X(std::int64_t, ps_piece_bytes, "HPCT_PS_PIECE_BYTES", 4 << 20,                               \
    "ps: gradients are cut into pieces of at most this many bytes, spread over the servers")   \
  X(double, elastic_timeout_s, "HPCT_ELASTIC_TIMEOUT_S", 60.0,                                 \
    "elastic: seconds a re-rendezvous may take, and that launch waits below --min-np before "  \
    "it fails naming the lost hosts (docs/elastic.md)")                                        \
  X(bool, ps_frame_mac, "HPCT_PS_FRAME_MAC", false,                                             \
    "ps: every parameter-server frame carries an HMAC (off: authenticated once at connect)")   \
  X(std::int64_t, ps_push_window, "HPCT_PS_PUSH_WINDOW", 0,                                     \
    "ps: pieces a worker has pushed and not yet got back, in order (0: one per server; -1: all)")

// Variables that describe the job rather than tune it: set by hpctrain launch
// for every rank, read by discover_world() (core/world.h), never by hand.
#define HPCT_JOB_VARIABLES(X)                                                         \
  X("HPCT_RANK") X("HPCT_SIZE") X("HPCT_LOCAL_RANK") X("HPCT_LOCAL_SIZE")             \
  X("HPCT_CROSS_RANK") X("HPCT_CROSS_SIZE") X("HPCT_HOSTNAME") X("HPCT_RESTART")      \
  X("HPCT_JOB_ID") X("HPCT_ELASTIC_ID")                                               \
  X("HPCT_PS_ROLE") X("HPCT_PS_SERVERS") X("HPCT_PS_SERVER_RANK") X("HPCT_PS_WORKERS")

// The source of a value, as `hpctrain config` prints it.
enum class ConfigSource { kDefault, kEnv, kFlag };

struct ConfigEntry {
  std::string env_name;   // HPCT_TIMEOUT_S
  std::string flag_name;  // --timeout-s
  std::string type;       // double, int, bool, string
  std::string value;      // effective value, printed
  std::string default_value;
  std::string doc;
  ConfigSource source = ConfigSource::kDefault;
};

struct Config {
#define HPCT_CONFIG_FIELD(TYPE, FIELD, ENV, DEF, DOC) TYPE FIELD = DEF;
  HPCT_CONFIG_PARAMS(HPCT_CONFIG_FIELD)
#undef HPCT_CONFIG_FIELD

  // Reads every declared HPCT_* variable. A malformed value raises
  // InvalidArgument naming the variable, the value and the expected type.
  // HPCT_* variables that are not declared are kept in unknown_env so the
  // caller can warn (with the nearest declared name).
  static Config from_env(const Env& env);

  // Sets one parameter by its env name (HPCT_TIMEOUT_S) or flag name
  // (timeout-s or --timeout-s). Unknown names and malformed values raise
  // InvalidArgument.
  void set(const std::string& name, const std::string& value, ConfigSource source);

  // Every parameter with its effective value and where it came from.
  std::vector<ConfigEntry> describe() const;

  // "HPCT_TIMOUT_S is not an hpctrain variable; did you mean HPCT_TIMEOUT_S?"
  std::vector<std::string> unknown_env_warnings() const;

  std::map<std::string, ConfigSource> sources;  // by env name; absent = default
  std::vector<std::string> unknown_env;
};

}  // namespace hpct
