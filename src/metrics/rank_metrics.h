// One rank's Prometheus endpoint: http://ADDRESS:PORT/metrics, served and
// encoded by prometheus-cpp (no hand-written exposition). Off unless
// HPCT_METRICS_PORT (hpctrain launch --metrics-port) is set; rank r listens
// on that port + its local rank, on the address the job's connections use.
//
// Names follow Prometheus conventions (hpctrain_ prefix, base units, _total
// on counters). Every series has the labels rank, host and job; a family
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
//   hpctrain_restarts_total                            restarts of the job before this run
//   hpctrain_process_cpu_seconds_total, hpctrain_process_resident_memory_bytes
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
#include <memory>
#include <string>

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

struct RankMetricsOptions {
  std::string bind_address = "127.0.0.1";
  int port = 0;  // 0: a free port (tests)
  int rank = 0;
  std::string host;
  std::string job = "hpctrain";
  int restarts = 0;
  const engine::Engine* engine = nullptr;      // may be null
  const comm::Communicator* comm = nullptr;    // may be null
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

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// This rank's endpoint as the job's settings say (HPCT_METRICS_PORT + local
// rank; HPCT_BIND_ADDRESS, else the address that reaches the job's store,
// else loopback; job and host from HPCT_JOB_ID and HPCT_HOSTNAME), or null
// when HPCT_METRICS_PORT is 0.
std::unique_ptr<RankMetrics> rank_metrics_from_config(const Config& config, const WorldInfo& world,
                                                      const Env& env, const engine::Engine* engine,
                                                      const comm::Communicator* comm);

}  // namespace hpct::metrics
