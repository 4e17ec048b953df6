#include "train/cuda_plugin/nccl_stream_collectives.h"

#include <cuda_runtime_api.h>

#include <string>
#include <utility>

#include "comm/cuda/cuda_check.h"

namespace hpct::train {

using comm::cuda::check;

NcclStreamCollectives::NcclStreamCollectives(std::unique_ptr<comm::NcclCommunicator> comm)
    : comm_(std::move(comm)) {}

NcclStreamCollectives::~NcclStreamCollectives() {
  const int device = comm_->device();
  comm_.reset();
  int previous = device;
  if (cudaGetDevice(&previous) != cudaSuccess) previous = device;
  if (previous != device) cudaSetDevice(device);
  if (ready_ != nullptr) cudaEventDestroy(ready_);
  if (done_ != nullptr) cudaEventDestroy(done_);
  if (previous != device) cudaSetDevice(previous);
}

bool NcclStreamCollectives::serves(const engine::Device& d) const {
  return d.kind() == engine::DeviceKind::kCuda && d.index() == comm_->device();
}

template <typename Enqueue>
void NcclStreamCollectives::run_on(engine::Stream s, const char* op, Enqueue&& enqueue) {
  const std::string what = std::string("nccl ") + op + " on cuda:" + std::to_string(comm_->device());
  comm::cuda::DeviceGuard guard(comm_->device(), what);
  auto* stream = static_cast<cudaStream_t>(s.handle);
  if (ready_ == nullptr) {
    check(cudaEventCreateWithFlags(&ready_, cudaEventDisableTiming), what + ": cudaEventCreate");
    check(cudaEventCreateWithFlags(&done_, cudaEventDisableTiming), what + ": cudaEventCreate");
  }
  // NCCL's error of the previous operation, if it reported one.
  if (issued_) comm_->poll(last_);
  // The fusion buffer is written by copies enqueued on s: NCCL's stream
  // starts after them.
  check(cudaEventRecord(ready_, stream), what + ": cudaEventRecord");
  last_ = enqueue(ready_, done_);
  issued_ = true;
  // The copies out of the buffer, enqueued on s next, start after NCCL.
  check(cudaStreamWaitEvent(stream, done_, 0), what + ": cudaStreamWaitEvent");
}

void NcclStreamCollectives::allreduce(void* buffer, std::size_t count, comm::DataType dtype, comm::ReduceOp op,
                                      engine::Stream s) {
  comm::AllreduceOptions o;
  o.input = buffer;
  o.output = buffer;
  o.count = count;
  o.dtype = dtype;
  o.op = op;
  run_on(s, "allreduce", [&](CUevent_st* ready, CUevent_st* done) { return comm_->enqueue(o, ready, done); });
}

void NcclStreamCollectives::broadcast(void* buffer, std::size_t count, comm::DataType dtype, int root,
                                      engine::Stream s) {
  comm::BroadcastOptions o;
  o.buffer = buffer;
  o.count = count;
  o.dtype = dtype;
  o.root = root;
  run_on(s, "broadcast", [&](CUevent_st* ready, CUevent_st* done) { return comm_->enqueue(o, ready, done); });
}

void NcclStreamCollectives::allgatherv(const void* input, void* output, const std::vector<std::size_t>& counts,
                                       engine::Stream s) {
  comm::AllgathervOptions o;
  o.input = input;
  o.output = output;
  o.counts = counts;
  o.dtype = comm::DataType::kUInt8;  // counts are bytes
  run_on(s, "allgatherv", [&](CUevent_st* ready, CUevent_st* done) { return comm_->enqueue(o, ready, done); });
}

}  // namespace hpct::train
