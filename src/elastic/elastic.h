// Elastic training: hosts leave and join a running job, and training goes
// on from the last commit instead of restarting the job (docs/elastic.md).
//
//   hpct::elastic::State state(*model, *optimizer);
//   hpct::elastic::run(state, [&](hpct::Context& ctx) {
//     hpct::DistributedOptimizer opt(ctx, *optimizer, model->named_parameters());
//     for (; state.epoch < epochs; ++state.epoch, state.batch = 0) {
//       for (; state.batch < batches; ++state.batch) {
//         ... forward, backward, opt.step(); ++state.step;
//         if (state.step % 10 == 0) state.commit();   // membership changes land here
//       }
//     }
//   });
//
// run() joins the job's current membership generation (launch's protocol,
// launch/elastic_protocol.h), makes a Context for it, syncs the state from
// rank 0 (the member that has been in the job longest) and calls the
// function. When a peer fails (an hpct::Error PeerFailure or Timeout
// anywhere in the function), each survivor reports it, drops its Context
// (engine and communicator), restores its last commit, waits for the
// launcher's next generation, connects a new world, syncs and calls the
// function again: work since the last commit is lost, nothing else. A
// membership change that is not a failure (hosts joining or removed by
// discovery) is applied at a commit, never inside a collective: every rank
// leaves at the same commit, with nothing to roll back.
//
// Threads: a State and run() belong to one training thread.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>

#include "core/clock.h"
#include "core/config.h"
#include "core/log.h"
#include "hpctrain/hpctrain.h"

namespace hpct::elastic {

class Rendezvous;

// What the last membership change did, for logs and metrics.
struct Change {
  std::int64_t generation = 0;
  std::string reason;  // the launcher's: "failure: ...", "joined: ...", ...
  int old_size = 0;
  int new_size = 0;
  std::int64_t rollback_steps = 0;  // steps since the last commit that were lost (rank 0's)
  double seconds = 0;               // from the failure (or the commit) to training again
};

class State {
 public:
  // The model and optimizer are the caller's and must outlive the State.
  State(torch::nn::Module& model, torch::optim::Optimizer& optimizer);
  ~State();
  State(const State&) = delete;
  State& operator=(const State&) = delete;

  // The position, committed, restored and synced with the model.
  std::int64_t epoch = 0;
  std::int64_t batch = 0;    // batches done in this epoch (by this world)
  std::int64_t step = 0;     // optimizer steps of the job
  std::int64_t samples = 0;  // samples of this epoch the whole job consumed (elastic sampler)
  std::map<std::string, double> extras;  // the user's own values

  // save(), then (inside run) asks whether the membership changed; when it
  // did, every rank leaves the function here together and run() goes on
  // in the new world. One store round trip on rank 0 and one 1-number
  // allreduce.
  void commit();
  // The in-memory copy (and, with write_every, the file every N commits).
  void save();
  // Back to the last save().
  void restore();
  // Rank 0's state to every rank (then save()). run() calls it after every
  // (re)connect.
  void sync();

  // Also write the committed state to `path` (rank 0; tmp + rename) every
  // `commits` commits. 0: never.
  void write_every(const std::string& path, int commits);
  // Called in every rank after a membership change, with the old and new
  // size (old 0 at the start): rescale the learning rate here.
  void on_size_change(std::function<void(int old_size, int new_size)> callback);

  // The Context of the current world (inside run's function).
  Context& context();
  // This worker's id in the job (HPCT_ELASTIC_ID; -1 outside run).
  std::int64_t worker_id() const { return worker_id_; }
  std::int64_t commits() const { return commits_; }
  std::int64_t committed_step() const;
  const Change& last_change() const { return last_change_; }

 private:
  friend bool run(State& state, const std::function<void(Context&)>& train, const Config& config,
                  const Logger& logger);
  std::string serialize() const;
  void deserialize(const std::string& bytes);

  torch::nn::Module& model_;
  torch::optim::Optimizer& optimizer_;
  std::string saved_;
  std::int64_t saved_step_ = 0;
  std::int64_t commits_ = 0;
  std::string file_;
  int file_every_ = 0;
  std::function<void(int, int)> on_size_change_;
  Context* ctx_ = nullptr;
  Rendezvous* rdv_ = nullptr;
  std::int64_t gen_ = -1;
  std::int64_t worker_id_ = -1;
  Change last_change_;
};

// Runs train under the elastic protocol (above). Returns true when train
// returned on this worker, false when the launcher removed this worker
// from the job at a commit. Errors other than PeerFailure and Timeout
// propagate. Timeout when no usable generation comes within
// HPCT_ELASTIC_TIMEOUT_S (the launcher is gone, or the job stayed below
// --min-np). Needs `hpctrain launch --min-np/--max-np` (InvalidArgument
// otherwise).
bool run(State& state, const std::function<void(Context&)>& train, const Config& config,
         const Logger& logger);

}  // namespace hpct::elastic
