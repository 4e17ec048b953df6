// The Python package's view of one rank: a Context (include/hpctrain/hpctrain.h)
// and the engine's named operations on torch tensors, as hpctrain.torch calls
// them. One Runtime per process, owned by the Python module (hvd.init()); the
// C++ side keeps no global of its own.
//
// Threads: every method may be called from any thread; none needs the GIL
// (module.cc releases it around the blocking ones: construction, wait).
#pragma once

#include <torch/csrc/distributed/c10d/Store.hpp>
#include <torch/types.h>

#include <memory>
#include <string>
#include <vector>

#include "elastic/elastic.h"
#include "engine/engine.h"
#include "hpctrain/hpctrain.h"

namespace hpct::py {

// One submitted operation: its engine handle and the tensor it writes.
class Operation {
 public:
  Operation() = default;
  Operation(engine::Handle handle, torch::Tensor output,
            std::shared_ptr<torch::Tensor> gathered = nullptr,
            std::shared_ptr<std::string> mismatch = nullptr)
      : handle_(std::move(handle)),
        output_(std::move(output)),
        gathered_(std::move(gathered)),
        mismatch_(std::move(mismatch)) {}

  // Done (successfully or not)? Never blocks.
  bool poll() const { return handle_.poll(); }
  // Blocks until done (bounded by HPCT_TIMEOUT_S through the communicator);
  // raises the operation's hpct::Error. Returns the written tensor.
  torch::Tensor wait() const;
  const std::string& name() const { return handle_.name(); }
  // The engine's handle alone (keeps no tensor alive).
  const engine::Handle& handle() const { return handle_; }

 private:
  engine::Handle handle_;
  torch::Tensor output_;
  std::shared_ptr<torch::Tensor> gathered_;  // allgather: allocated by the engine thread
  // allgather_into: set by the engine thread when the result did not fit the
  // given tensor (it then went to a scratch tensor); wait() raises it.
  std::shared_ptr<std::string> mismatch_;
};

class Runtime {
 public:
  // Joins the job (hpct::init(): hpctrain launch, mpirun, srun or one rank).
  // Blocks until every rank joined or HPCT_TIMEOUT_S ran out. A worker of
  // an elastic job (`hpctrain launch --min-np A --max-np B`) joins its
  // first membership generation instead (elastic::Worker, bounded by
  // HPCT_ELASTIC_TIMEOUT_S); hpctrain.torch.elastic.run moves it from one
  // generation's world to the next, and every method below acts on the
  // current one.
  Runtime();
  // Under torchrun (no hpctrain launcher): rank of size meet through
  // torch.distributed's store (c10d_store.h), over Gloo with shared memory
  // within a host; LOCAL_RANK, LOCAL_WORLD_SIZE and MASTER_ADDR come from
  // torchrun's variables. Bounded by HPCT_TIMEOUT_S.
  static std::shared_ptr<Runtime> from_torch_store(c10::intrusive_ptr<c10d::Store> store, int rank,
                                                   int size);
  ~Runtime();
  Runtime(const Runtime&) = delete;
  Runtime& operator=(const Runtime&) = delete;

  int rank() const;
  int size() const;
  int local_rank() const;
  int local_size() const;
  // HPCT_OVERLAP resolved as the C++ DistributedOptimizer does (auto: off
  // when this host's ranks x intra-op threads fill its usable cores).
  bool overlap_default() const;
  Context& context();

  // In place on t (CPU, contiguous). op: sum, avg, min, max, product.
  // compression: "" (the engine's default, HPCT_COMPRESSION), none, fp16, bf16.
  // stack (every operation): the caller's Python frames, kept in the
  // engine's flight record (engine/flight_record.h).
  Operation allreduce(const torch::Tensor& t, const std::string& name, const std::string& op,
                      const std::string& compression, const std::string& stack = "");
  // Every rank's rows of t (first dimensions may differ), in rank order, in a new tensor.
  Operation allgather(const torch::Tensor& t, const std::string& name, const std::string& stack = "");
  // The same, written into `out` (CPU, contiguous, of t's dtype), which must
  // hold every rank's elements: no result tensor is allocated (the sharded
  // optimizer gathers parameters into their own storage). A result of
  // another element count goes to a scratch tensor and wait() raises
  // InvalidArgument naming both counts. t must not overlap out.
  Operation allgather_into(const torch::Tensor& t, const std::string& name, const torch::Tensor& out);
  // In place on t: root's values everywhere.
  Operation broadcast(const torch::Tensor& t, const std::string& name, int root, const std::string& stack = "");
  // The training loop's phase in the flight record: none, data, forward,
  // backward, optimizer, checkpoint, eval (step -1: unchanged).
  void set_phase(const std::string& phase, std::int64_t step);

  // Shuts the engine down on every rank (pending operations fail); idempotent.
  void shutdown();

  // The elastic worker, or nullptr in a job of fixed size.
  elastic::Worker* elastic_worker() { return worker_.get(); }

 private:
  explicit Runtime(std::unique_ptr<Context> ctx) : ctx_(std::move(ctx)) {}
  Context& live();
  const Context* current() const;
  std::unique_ptr<elastic::Worker> worker_;  // elastic jobs: owns the current world
  std::unique_ptr<Context> ctx_;             // fixed-size jobs
};

}  // namespace hpct::py
