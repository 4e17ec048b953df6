#include "bench/raw_allreduce.h"

#include <mpi.h>

#include <gloo/allreduce.h>
#include <gloo/math.h>

#include "comm/gloo/communicator.h"
#include "comm/mpi/communicator.h"
#include "core/error.h"

namespace hpct::bench {
namespace {

// Called from the benchmark's thread while our MPI worker thread is idle:
// legal under MPI_THREAD_SERIALIZED, which MpiCommunicator asks for.
class MpiRawAllreduce final : public RawAllreduce {
 public:
  std::string name() const override { return "MPI_Allreduce"; }
  void run(float* data, size_t count) override {
    int rc = MPI_Allreduce(MPI_IN_PLACE, data, static_cast<int>(count), MPI_FLOAT, MPI_SUM,
                           MPI_COMM_WORLD);
    if (rc != MPI_SUCCESS) throw Error(ErrorCode::kIo, "raw MPI_Allreduce failed");
  }
};

class GlooRawAllreduce final : public RawAllreduce {
 public:
  explicit GlooRawAllreduce(std::shared_ptr<gloo::Context> context) : context_(std::move(context)) {}
  std::string name() const override { return "gloo::allreduce"; }
  void run(float* data, size_t count) override {
    if (count == 0 || !context_) return;
    gloo::AllreduceOptions o(context_);
    o.setOutput(data, count);
    o.setReduceFunction(
        static_cast<void (*)(void*, const void*, const void*, size_t)>(&gloo::sum<float>));
    o.setAlgorithm(gloo::AllreduceOptions::Algorithm::RING);
    o.setTag(0x7f000000u);  // apart from the tags our own ops use
    gloo::allreduce(o);
  }

 private:
  std::shared_ptr<gloo::Context> context_;
};

}  // namespace

std::unique_ptr<RawAllreduce> make_raw_allreduce(comm::Communicator& comm) {
  if (dynamic_cast<comm::MpiCommunicator*>(&comm) != nullptr) {
    return std::make_unique<MpiRawAllreduce>();
  }
  if (auto* g = dynamic_cast<comm::GlooCommunicator*>(&comm)) {
    return std::make_unique<GlooRawAllreduce>(g->gloo_context());
  }
  return nullptr;
}

}  // namespace hpct::bench
