// The "hpctrain" torch.distributed backend: a c10d::Backend (torch 2.x wraps
// it in its own ProcessGroup, as for gloo and nccl) whose collectives are the
// engine's named operations (engine/engine.h), so DDP's
// buckets go through the same negotiation, shared memory and compression as
// the C++ DistributedOptimizer.
//
// Each collective is submitted at once under a name that every rank derives
// alike: every rank creates groups and issues a group's collectives in the
// same order (torch.distributed requires it). Allreduce, broadcast and
// barrier names are stable from step to step, so the engine's response cache
// (keyed by name) lets DDP's buckets skip negotiation after the first step:
// "pg0/allreduce/float/sum/1048576/3" is the 3rd (mod kNameSlots) allreduce of
// that signature. Before a slot's name is reused, the operation that last
// held it is waited for (the engine refuses a name still pending); that
// operation was issued earlier by every rank, so the wait ends. Allgather,
// whose shapes may differ across ranks, keeps a fresh name per call
// ("pg0/allgather/17"). The call returns a Work at once; a
// completion thread waits for the engine's handles in submission order,
// copies results that do not land in place (allgather, non-contiguous
// tensors) and completes the Work's Future, which is what DDP's reducer
// waits on (work.get_future()). Future callbacks therefore run on that
// thread.
//
// Failure: an engine error (Timeout, PeerFailure naming the rank) sets the
// Future's error; Work.wait() rethrows it as hpct::Error's message. No wait is
// unbounded: the engine's waits end within HPCT_TIMEOUT_S of a dead peer.
//
// Threads: collectives may be called from any thread (DDP calls them from
// autograd); the completion thread is joined by the destructor.
#pragma once

#include <atomic>
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/distributed/c10d/Work.hpp>
#include <unordered_map>
#include <vector>

#include "runtime.h"

namespace hpct::py {

class EngineWork : public c10d::Work {
 public:
  EngineWork(c10d::OpType type, std::vector<at::Tensor> outputs);
  bool isCompleted() override;
  bool isSuccess() const override;
  std::exception_ptr exception() const override;
  std::vector<at::Tensor> result() override { return outputs_; }
  // Blocks until the engine finished (bounded by the engine's own timeout);
  // rethrows its error.
  bool wait(std::chrono::milliseconds timeout) override;
  void synchronize() override {}
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override { return future_; }

  void finish(std::exception_ptr error);

 private:
  std::vector<at::Tensor> outputs_;
  c10::intrusive_ptr<c10::ivalue::Future> future_;
};

class EngineBackend : public c10d::Backend {
 public:
  // rank and size must be the runtime's (InvalidArgument naming both
  // otherwise: groups of a subset of the ranks are not supported). index:
  // this group's place among the process's hpctrain groups (the same on every
  // rank), which keeps two groups' names apart.
  EngineBackend(std::shared_ptr<Runtime> runtime, int rank, int size, int index);
  ~EngineBackend() override;

  const std::string getBackendName() const override { return "hpctrain"; }

  c10::intrusive_ptr<c10d::Work> broadcast(std::vector<at::Tensor>& tensors,
                                           const c10d::BroadcastOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allreduce(std::vector<at::Tensor>& tensors,
                                           const c10d::AllreduceOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allreduce_coalesced(
      std::vector<at::Tensor>& tensors, const c10d::AllreduceCoalescedOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allgather(std::vector<std::vector<at::Tensor>>& outputs,
                                           std::vector<at::Tensor>& inputs,
                                           const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> _allgather_base(at::Tensor& output, at::Tensor& input,
                                                 const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> barrier(const c10d::BarrierOptions& opts) override;

 private:
  struct Pending {
    std::vector<Operation> ops;
    std::function<void()> after;  // copies results out; runs on the completion thread
    c10::intrusive_ptr<EngineWork> work;
  };

  std::string next_name(const char* op);
  // The stable name for the next collective `op` on t (see the file comment);
  // waits for the operation that last held it. Call under submit_mu_.
  std::string stable_name(const std::string& op, const at::Tensor& t, const std::string& detail);
  // Remembers which operation holds its name now. Call under submit_mu_.
  void hold(const Operation& op);
  c10::intrusive_ptr<c10d::Work> enqueue(c10d::OpType type, std::vector<at::Tensor> outputs,
                                         std::vector<Operation> ops, std::function<void()> after);
  void complete_loop();

  std::shared_ptr<Runtime> runtime_;
  const std::string prefix_;  // "pg<index>/"
  std::atomic<std::uint64_t> seq_{0};
  static constexpr std::uint64_t kNameSlots = 16;
  // Names and submission in one order on every rank, whatever thread calls.
  std::mutex submit_mu_;
  std::unordered_map<std::string, std::uint64_t> signature_count_;  // GUARDED_BY(submit_mu_)
  std::unordered_map<std::string, engine::Handle> name_holder_;     // GUARDED_BY(submit_mu_)
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Pending> queue_;  // GUARDED_BY(mu_)
  bool stop_ = false;          // GUARDED_BY(mu_)
  std::thread completer_;
};

}  // namespace hpct::py
