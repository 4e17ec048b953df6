#include "train/cuda_plugin/nccl_stream_collectives.h"

#include <cuda_runtime_api.h>

#include <string>
#include <utility>

#include "comm/cuda/cuda_check.h"

namespace hpct::train {
namespace {

using comm::cuda::check;

// An event for one call; destroyed at once after use (CUDA keeps it alive
// until pending work that records or waits on it is done).
class CallEvent {
 public:
  explicit CallEvent(const std::string& what) {
    check(cudaEventCreateWithFlags(&event_, cudaEventDisableTiming), what + ": cudaEventCreate");
  }
  ~CallEvent() { cudaEventDestroy(event_); }
  CallEvent(const CallEvent&) = delete;
  CallEvent& operator=(const CallEvent&) = delete;
  cudaEvent_t get() const { return event_; }

 private:
  cudaEvent_t event_ = nullptr;
};

}  // namespace

NcclStreamCollectives::NcclStreamCollectives(std::unique_ptr<comm::NcclCommunicator> comm)
    : comm_(std::move(comm)) {}

bool NcclStreamCollectives::serves(const engine::Device& d) const {
  return d.kind() == engine::DeviceKind::kCuda && d.index() == comm_->device();
}

template <typename Enqueue>
void NcclStreamCollectives::run_on(engine::Stream s, const char* op, Enqueue&& enqueue) {
  const std::string what = std::string("nccl ") + op + " on cuda:" + std::to_string(comm_->device());
  comm::cuda::DeviceGuard guard(comm_->device(), what);
  auto* stream = static_cast<cudaStream_t>(s.handle);
  CallEvent ready(what);
  CallEvent done(what);
  // The fusion buffer is written by copies enqueued on s: NCCL's stream
  // starts after them.
  check(cudaEventRecord(ready.get(), stream), what + ": cudaEventRecord");
  enqueue(ready.get(), done.get());
  // The copies out of the buffer, enqueued on s next, start after NCCL.
  check(cudaStreamWaitEvent(stream, done.get(), 0), what + ": cudaStreamWaitEvent");
}

void NcclStreamCollectives::allreduce(void* buffer, std::size_t count, comm::DataType dtype, comm::ReduceOp op,
                                      engine::Stream s) {
  comm::AllreduceOptions o;
  o.input = buffer;
  o.output = buffer;
  o.count = count;
  o.dtype = dtype;
  o.op = op;
  run_on(s, "allreduce", [&](CUevent_st* ready, CUevent_st* done) { comm_->enqueue(o, ready, done); });
}

void NcclStreamCollectives::broadcast(void* buffer, std::size_t count, comm::DataType dtype, int root,
                                      engine::Stream s) {
  comm::BroadcastOptions o;
  o.buffer = buffer;
  o.count = count;
  o.dtype = dtype;
  o.root = root;
  run_on(s, "broadcast", [&](CUevent_st* ready, CUevent_st* done) { comm_->enqueue(o, ready, done); });
}

void NcclStreamCollectives::allgatherv(const void* input, void* output, const std::vector<std::size_t>& counts,
                                       engine::Stream s) {
  comm::AllgathervOptions o;
  o.input = input;
  o.output = output;
  o.counts = counts;
  o.dtype = comm::DataType::kUInt8;  // counts are bytes
  run_on(s, "allgatherv", [&](CUevent_st* ready, CUevent_st* done) { comm_->enqueue(o, ready, done); });
}

}  // namespace hpct::train
