// DistributedOptimizer's parameter-server modes (HPCT_SYNC / --sync ps or
// ps-async; protocol in ps/server.h, job wiring in ps/job.h).
//
// ps: after backward, every gradient goes to the servers in pieces of
// HPCT_PS_PIECE_BYTES, all pushed at once and the sums read back while
// pushes still go out; the sum (in worker order: the same bits on every
// worker) is divided by the number of workers in it, and the wrapped
// optimizer steps on every worker alike, as after an allreduce.
// ps-async: the servers hold the parameters. The wrapped optimizer steps on
// the worker's own gradient (its momentum or Adam moments stay local, built
// from this worker's gradients only); the update (new minus old
// parameters) is pushed, the servers add update / W, and the worker carries
// on from the parameters the servers send back, at most S steps ahead of
// the slowest worker.
// One training thread; not thread-safe.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "hpctrain/hpctrain.h"
#include "ps/client.h"

namespace hpct {

class PsSync {
 public:
  // Joins the job's parameter servers (Client from the job store) and
  // registers params in order; async mode: rank 0's values become the
  // servers', and every worker's params receive them.
  PsSync(Context& ctx, ps::Mode mode, int staleness, const std::vector<std::string>& names,
         std::vector<torch::Tensor> params);
  ~PsSync();
  PsSync(const PsSync&) = delete;
  PsSync& operator=(const PsSync&) = delete;

  ps::Mode mode() const { return client_->mode(); }

  // Sync mode: grads summed over the active workers, then divided by their
  // number when average. Undefined gradients become zeros.
  void exchange_gradients(bool average);
  // Async mode: around the wrapped optimizer's step().
  void before_step();
  void after_step();
  // The epoch is over for this worker: waits for every worker (a barrier
  // that lets workers with fewer batches finish); async: params receive the
  // servers' parameters at that moment, the same on every worker.
  void end_epoch();

 private:
  std::vector<void*> param_ptrs();
  std::vector<torch::Tensor> params_;
  std::vector<torch::Tensor> old_;
  std::unique_ptr<ps::Client> client_;
};

}  // namespace hpct
