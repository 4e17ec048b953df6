// One rank's Prometheus endpoint: http://ADDRESS:PORT/metrics, served and
// encoded by prometheus-cpp (no hand-written exposition). Off unless
// HPCT_METRICS_PORT (hpctrain launch --metrics-port) is set; rank r listens
// on that port + its local rank, on the address the job's connections use.
//
// Names follow Prometheus conventions (hpctrain_ prefix, base units, _total
// on counters). Every series has the labels rank, host and launch_id (not job:
// Prometheus sets job from its scrape configuration); a family
// split in parts has one more (phase or path):
//
//   hpctrain_samples_total, hpctrain_steps_total       training progress
//   hpctrain_step_seconds                              histogram of steps
//   hpctrain_step_phase_seconds{phase}                 histogram of their
//                                                      data, compute, sync and optimizer parts
//   hpctrain_allreduce_calls_total{path}, hpctrain_allreduce_bytes_total{path},
//   hpctrain_allreduce_seconds_total{path}             by the path that carried them:
//                                                      shm, direct, ring, hierarchical, mpi
//   hpctrain_compression_ratio                         allreduced tensor bytes / bytes on the wire
//   hpctrain_stall_warnings_total                      the engine's stall warnings
//   hpctrain_reduce_scatter_bytes_total,
//   hpctrain_reduce_scatter_sent_bytes_total           reduce-scattered tensor bytes, and
//                                                      what this rank sent of them
//   hpctrain_straggler{cause}, hpctrain_straggler_slowdown_ratio,
//   hpctrain_straggler_late_seconds_total, hpctrain_straggler_wait_seconds_total
//                                                      the rank named slowest (engine/straggler.h)
//   hpctrain_restarts_total                            restarts of the job before this run
//   hpctrain_membership_changes_total, hpctrain_world_size
//                                                      elastic jobs: worlds since the start, ranks now
//   hpctrain_data_{http,s3}_bytes_total, hpctrain_data_{http,s3}_stalls_total,
//   hpctrain_data_{http,s3}_stall_seconds_total         remote shard reads by kind of source
//   hpctrain_process_cpu_seconds_total, hpctrain_process_resident_memory_bytes,
//   hpctrain_process_peak_resident_memory_bytes        the process (/proc/self; the peak is VmHWM)
//   hpctrain_parameter_bytes, hpctrain_gradient_bytes, hpctrain_optimizer_state_bytes,
//   hpctrain_parameter_peak_bytes                      what this rank holds of the model's
//                                                      parameters, gradients and optimizer
//                                                      state (its part when they are sharded),
//                                                      and the most parameter bytes held at once
//                                                      (sharded parameters: with the layers
//                                                      gathered), as the optimizer reports them
//                                                      (record_memory)
//
// The engine's and the communicator's figures are read when Prometheus
// scrapes (their thread-safe snapshots), the training figures when the
// trainer records a step.
//
// Threads: record_step may be called from any thread; scrapes run on
// prometheus-cpp's server threads. The engine and communicator must outlive
// this object.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace hpct {
struct Config;
struct WorldInfo;
class Env;
namespace comm {
class Communicator;
}
namespace engine {
class Engine;
}
}  // namespace hpct

namespace hpct::metrics {

// Remote shard reads of one kind of source, summed over its sources (the
// data layer's per-source counters): "http" (http:// and https://) or "s3".
struct DataSourceTotals {
  std::string kind;
  double bytes = 0;          // body bytes received
  double stalls = 0;         // reads that waited for bytes not yet arrived
  double stall_seconds = 0;  // time spent in those waits
};

// The data source kinds exported, each as its own families (the kind is in
// the name, not a label: hpctrain_data_s3_bytes_total).
inline const char* const kDataSourceKinds[] = {"http", "s3"};

// What a rank holds of the model, in bytes (RankMetrics::record_memory); the
// fields of hpct::MemoryBytes (DistributedOptimizer::memory_bytes()).
struct MemoryBytes {
  double parameters = 0;
  double gradients = 0;
  double optimizer_state = 0;
  double parameters_peak = 0;  // the most parameter bytes held at once so far
};

struct RankMetricsOptions {
  std::string bind_address = "127.0.0.1";
  int port = 0;  // 0: a free port (tests)
  int rank = 0;
  std::string host;
  std::string launch_id = "hpctrain";  // the job's id (HPCT_JOB_ID): label launch_id
  int restarts = 0;
  const engine::Engine* engine = nullptr;      // may be null
  const comm::Communicator* comm = nullptr;    // may be null
  // Read at scrape time, from the scrape's thread; may be empty.
  std::function<std::vector<DataSourceTotals>()> data_sources;
};

class RankMetrics {
 public:
  // Starts listening; Io naming the address and the setting when it cannot.
  explicit RankMetrics(const RankMetricsOptions& options);
  ~RankMetrics();
  RankMetrics(const RankMetrics&) = delete;
  RankMetrics& operator=(const RankMetrics&) = delete;

  int port() const;         // the port it listens on
  std::string url() const;  // http://address:port/metrics

  // One training step: its samples (this rank's) and its parts in seconds.
  void record_step(std::int64_t samples, double data_s, double compute_s, double sync_s,
                   double optimizer_s);

  // An elastic job's world: `changes` membership changes since the job
  // began (the elastic generation; never decreasing) and the ranks now in it.
  void record_world(std::int64_t changes, int size);

  // The bytes this rank holds of the model's parameters, gradients and
  // optimizer state (with sharding: its part, plus what is gathered at the
  // time of the call). The optimizer calls it when they change (after the
  // first step, after a re-shard); the gauges keep the last values.
  void record_memory(const MemoryBytes& bytes);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// This rank's endpoint as the job's settings say (HPCT_METRICS_PORT + local
// rank; HPCT_BIND_ADDRESS, else the address that reaches the job's store,
// else loopback; launch id and host from HPCT_JOB_ID and HPCT_HOSTNAME), or null
// when HPCT_METRICS_PORT is 0.
std::unique_ptr<RankMetrics> rank_metrics_from_config(const Config& config, const WorldInfo& world,
                                                      const Env& env, const engine::Engine* engine,
                                                      const comm::Communicator* comm,
                                                      std::function<std::vector<DataSourceTotals>()> data_sources = {});

}  // namespace hpct::metrics
