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
// A frontend that joins the job before it has a training function (the
// Python package: hvd.init() gives rank and size, hvd.elastic.run comes
// later) makes the Worker itself and passes it to run().
//
// Threads: a State, a Worker and run() belong to one training thread.
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
class Worker;

// Thrown by State::commit() and check_host_updates() on every rank of a
// world when the launcher published a newer generation; run() catches it
// and goes to that generation with nothing rolled back. Deliberately not an
// hpct::Error, so a training function that catches Error does not swallow
// it.
struct MembershipChanged {
  std::int64_t generation = 0;
  SteadyClock::time_point at;
};

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
  // A state whose model, optimizer and objects the caller turns into bytes
  // and back (the Python frontend: torch.save of their state_dicts). save()
  // is called at every save() and on rank 0 at sync(); load() at restore()
  // and on the other ranks at sync(). The position and extras below are
  // kept beside the payload as for the other constructor.
  struct Payload {
    std::function<std::string()> save;
    std::function<void(const std::string&)> load;
  };
  explicit State(Payload payload);
  ~State();
  State(const State&) = delete;
  State& operator=(const State&) = delete;

  // The position, committed, restored and synced with the model.
  std::int64_t epoch = 0;
  std::int64_t batch = 0;    // batches done in this epoch (by this world)
  std::int64_t step = 0;     // optimizer steps of the job
  std::int64_t samples = 0;  // samples of this epoch the whole job consumed (elastic sampler)
  std::map<std::string, double> extras;  // the user's own values

  // save(), then check_host_updates().
  void commit();
  // (Inside run) asks whether the membership changed; when it did, every
  // rank leaves the function here together (MembershipChanged) and run()
  // goes on in the new world. One store round trip on rank 0 and one
  // 1-number allreduce; every rank of the world must call it together.
  void check_host_updates();
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
  // Called in every new world after run()'s first, before the state is
  // synced (Horovod's reset callbacks): what it sets on rank 0 reaches the
  // new ranks with the sync.
  void on_reset(std::function<void()> callback);

  // The Context of the current world (inside run's function).
  Context& context();
  // This worker's id in the job (HPCT_ELASTIC_ID; -1 outside run).
  std::int64_t worker_id() const { return worker_id_; }
  std::int64_t commits() const { return commits_; }
  std::int64_t committed_step() const;
  const Change& last_change() const { return last_change_; }

 private:
  friend bool run(State& state, Worker& worker, const std::function<void(Context&)>& train);
  std::string serialize() const;
  void deserialize(const std::string& bytes);

  torch::nn::Module* model_ = nullptr;
  torch::optim::Optimizer* optimizer_ = nullptr;
  Payload payload_;
  std::string saved_;
  std::int64_t saved_step_ = 0;
  std::int64_t commits_ = 0;
  std::string file_;
  int file_every_ = 0;
  std::function<void(int, int)> on_size_change_;
  std::function<void()> on_reset_;
  Context* ctx_ = nullptr;
  Worker* worker_ = nullptr;
  std::int64_t worker_id_ = -1;
  Change last_change_;
};

// This process's place in an elastic job: its side of the rendezvous
// (the job store) and the world of its current generation.
class Worker {
 public:
  // Opens the job's store and tells the launcher this worker is ready.
  // InvalidArgument when the process was not started by `hpctrain launch
  // --min-np A --max-np B`.
  Worker(const Config& config, const Logger& logger);
  ~Worker();
  Worker(const Worker&) = delete;
  Worker& operator=(const Worker&) = delete;

  // Waits for the next generation after the current one that has this
  // worker and connects its world (a failed attempt is reported and the
  // next generation tried). True with a world; false when the launcher
  // removed this worker. Timeout when no usable generation comes within
  // HPCT_ELASTIC_TIMEOUT_S (the launcher is gone, or the job stayed below
  // --min-np). Drops the current world first.
  bool join();
  bool joined() const { return ctx_ != nullptr; }
  // The current world's Context (InvalidArgument between worlds).
  Context& context();
  // Drops the current world: the engine, then the communicator.
  void leave();
  std::int64_t id() const;
  std::int64_t generation() const { return gen_; }
  // The launcher's reason for the current generation ("failure: ...").
  const std::string& reason() const { return reason_; }

 private:
  friend class State;
  friend bool run(State& state, Worker& worker, const std::function<void(Context&)>& train);
  Config config_;
  Logger logger_;
  std::unique_ptr<Rendezvous> rdv_;
  std::unique_ptr<Context> ctx_;
  std::int64_t gen_ = -1;   // the generation of ctx_, or the last one left
  bool taken_in_ = false;   // has been a member of some generation
  std::string reason_;
};

// Runs train under the elastic protocol (above). Returns true when train
// returned on this worker, false when the launcher removed this worker
// from the job at a commit. Errors other than PeerFailure and Timeout
// propagate. Timeout when no usable generation comes within
// HPCT_ELASTIC_TIMEOUT_S (the launcher is gone, or the job stayed below
// --min-np). Needs `hpctrain launch --min-np/--max-np` (InvalidArgument
// otherwise). The first form makes its own Worker; the second uses the
// caller's, joined already or not.
bool run(State& state, const std::function<void(Context&)>& train, const Config& config,
         const Logger& logger);
bool run(State& state, Worker& worker, const std::function<void(Context&)>& train);

}  // namespace hpct::elastic
