// The engine's device collectives (engine::StreamCollectives) on NCCL: each
// call records a ready event on the engine's stream, enqueues the operation
// on the NcclCommunicator's own stream after that event
// (NcclCommunicator::enqueue), and makes the engine's stream wait for the
// done event recorded after it. Neither the host nor the engine's stream
// blocks on the GPU; the host only waits (bounded by the communicator's
// timeout) until NCCL has queued the operation.
//
// Events: one ready and one done event, made at the first call and recorded
// again by each (a wait takes the event's latest record, made just before
// it). Before each operation the previous one is polled
// (NcclCommunicator::poll, which never blocks), so an error NCCL reports
// asynchronously (a failed peer) fails the next operation with NCCL's error,
// instead of only the engine's bounded wait running out. Part of the CUDA
// plugin (gpu_plugin.h); CUDA's headers stay in the .cc file.
//
// Threads: called only by the engine's background thread (device.h). Owns
// the communicator; destroying it finalizes NCCL (bounded, never throws).
#pragma once

#include <memory>

#include "comm/nccl/communicator.h"
#include "engine/device.h"

namespace hpct::train {

class NcclStreamCollectives final : public engine::StreamCollectives {
 public:
  explicit NcclStreamCollectives(std::unique_ptr<comm::NcclCommunicator> comm);
  // The communicator first (bounded, never throws), then the events.
  ~NcclStreamCollectives() override;
  NcclStreamCollectives(const NcclStreamCollectives&) = delete;
  NcclStreamCollectives& operator=(const NcclStreamCollectives&) = delete;

  // The CUDA device of the communicator.
  bool serves(const engine::Device& d) const override;
  void allreduce(void* buffer, std::size_t count, comm::DataType dtype, comm::ReduceOp op,
                 engine::Stream s) override;
  void broadcast(void* buffer, std::size_t count, comm::DataType dtype, int root, engine::Stream s) override;
  void allgatherv(const void* input, void* output, const std::vector<std::size_t>& counts,
                  engine::Stream s) override;

  comm::NcclCommunicator& communicator() { return *comm_; }

 private:
  // Records `ready` on s, calls enqueue(ready, done), makes s wait on done.
  template <typename Enqueue>
  void run_on(engine::Stream s, const char* op, Enqueue&& enqueue);

  std::unique_ptr<comm::NcclCommunicator> comm_;
  CUevent_st* ready_ = nullptr;  // made at the first call, on the communicator's device
  CUevent_st* done_ = nullptr;
  comm::NcclWork last_;  // the previous operation (done_ is its event)
  bool issued_ = false;
};

}  // namespace hpct::train
