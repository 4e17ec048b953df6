#include "engine/blocking_stream_collectives.h"

#include <cassert>
#include <string>
#include <utility>

#include "core/error.h"

namespace hpct::engine {

BlockingStreamCollectives::BlockingStreamCollectives(std::shared_ptr<comm::Communicator> comm, Device& device,
                                                     Millis timeout)
    : comm_(std::move(comm)), device_(device), timeout_(timeout) {
  assert(comm_ != nullptr);
}

void BlockingStreamCollectives::drain(Stream s, const char* op) {
  if (!device_.synchronize(s, timeout_)) {
    throw Error(ErrorCode::kTimeout,
                std::string("rank ") + std::to_string(comm_->rank()) + ": the " + op + " on " + device_.str() +
                    " waited " + std::to_string(timeout_.count()) +
                    " ms for the engine's stream (the copies into the fusion buffer) to finish; the device is "
                    "stuck or overloaded: raise HPCT_TIMEOUT_S or look at the device's other work");
  }
}

void BlockingStreamCollectives::allreduce(void* buffer, std::size_t count, comm::DataType dtype,
                                          comm::ReduceOp op, Stream s) {
  drain(s, "allreduce");
  comm::AllreduceOptions o;
  o.output = buffer;
  o.count = count;
  o.dtype = dtype;
  o.op = op;
  o.timeout = timeout_;
  comm::allreduce(*comm_, o);
}

void BlockingStreamCollectives::broadcast(void* buffer, std::size_t count, comm::DataType dtype, int root,
                                          Stream s) {
  drain(s, "broadcast");
  comm::BroadcastOptions o;
  o.buffer = buffer;
  o.count = count;
  o.dtype = dtype;
  o.root = root;
  o.timeout = timeout_;
  comm::broadcast(*comm_, o);
}

void BlockingStreamCollectives::allgatherv(const void* input, void* output, const std::vector<std::size_t>& counts,
                                           Stream s) {
  drain(s, "allgatherv");
  comm::AllgathervOptions o;
  o.input = input;
  o.output = output;
  o.counts = counts;
  o.dtype = comm::DataType::kUInt8;
  o.timeout = timeout_;
  comm::allgatherv(*comm_, o);
}

}  // namespace hpct::engine
