#include "comm/tensor.h"

#include <ATen/ATen.h>

#include <sstream>

#include "core/error.h"

namespace hpct::comm {
namespace {

// InvalidArgument unless t can be handed to the communicator as raw memory.
void check_usable(const at::Tensor& t, const char* op, const char* name) {
  if (!t.defined()) throw_invalid_argument(std::string(op) + ": " + name + " is an undefined tensor");
  if (!t.device().is_cpu() && !t.device().is_cuda()) {
    throw_invalid_argument(std::string(op) + ": " + name + " is on " + t.device().str() +
                           "; hpctrain communicates CPU and CUDA tensors (call .cpu())");
  }
  if (!t.is_contiguous()) {
    throw_invalid_argument(std::string(op) + ": " + name +
                           " is not contiguous; call .contiguous() first");
  }
}

// The fields every tensor call fills alike: t's element count and type, the
// tag and the timeout.
template <typename Options>
Options options_for(const at::Tensor& t, std::uint32_t tag, Millis timeout) {
  Options o;
  o.count = static_cast<size_t>(t.numel());
  o.dtype = dtype_of(t);
  o.tag = tag;
  o.timeout = timeout;
  return o;
}

// The communicator moves host memory: a CUDA tensor goes through a host
// copy (the copy waits for the current stream, so the bytes are final), and
// a result comes back with to_device (ordered on the current stream). These
// calls block anyway; the engine (engine/device.h) is the asynchronous path.
at::Tensor on_host(const at::Tensor& t) { return t.device().is_cpu() ? t : t.to(at::kCPU); }
void write_back(at::Tensor& t, const at::Tensor& host) {
  if (!t.device().is_cpu()) t.copy_(host);
}
at::TensorOptions host_options(const at::Tensor& t) { return t.options().device(at::kCPU); }

std::string shape_of(const at::Tensor& t) {
  std::ostringstream os;
  os << t.sizes();
  return os.str();
}

}  // namespace

DataType dtype_of(const at::Tensor& t) {
  switch (t.scalar_type()) {
    case at::kFloat: return DataType::kFloat32;
    case at::kDouble: return DataType::kFloat64;
    case at::kHalf: return DataType::kFloat16;
    case at::kBFloat16: return DataType::kBFloat16;
    case at::kInt: return DataType::kInt32;
    case at::kLong: return DataType::kInt64;
    case at::kByte: return DataType::kUInt8;
    case at::kChar: return DataType::kInt8;
    case at::kShort: return DataType::kInt16;
    default:
      throw_invalid_argument(std::string("tensor dtype ") + c10::toString(t.scalar_type()) +
                             " cannot be communicated; use float32, float64, float16, bfloat16, "
                             "int64, int32, int16, int8 or uint8");
  }
}

void allreduce(Communicator& comm, at::Tensor& t, ReduceOp op, Millis timeout, std::uint32_t tag) {
  check_usable(t, "allreduce", "tensor");
  at::Tensor h = on_host(t);
  auto o = options_for<AllreduceOptions>(t, tag, timeout);
  o.output = h.data_ptr();
  o.op = op;
  allreduce(comm, o);
  write_back(t, h);
}

void broadcast(Communicator& comm, at::Tensor& t, int root, Millis timeout, std::uint32_t tag) {
  check_usable(t, "broadcast", "tensor");
  at::Tensor h = on_host(t);
  auto o = options_for<BroadcastOptions>(t, tag, timeout);
  o.buffer = h.data_ptr();
  o.root = root;
  broadcast(comm, o);
  write_back(t, h);
}

at::Tensor allgather(Communicator& comm, const at::Tensor& t, Millis timeout, std::uint32_t tag) {
  check_usable(t, "allgather", "tensor");
  std::vector<int64_t> shape{comm.size()};
  for (auto d : t.sizes()) shape.push_back(d);
  at::Tensor out = at::empty(shape, host_options(t));
  const at::Tensor h = on_host(t);
  auto o = options_for<AllgatherOptions>(t, tag, timeout);
  o.input = h.data_ptr();
  o.output = out.data_ptr();
  allgather(comm, o);
  return out.to(t.device());
}

at::Tensor allgatherv(Communicator& comm, const at::Tensor& t, Millis timeout, std::uint32_t tag) {
  check_usable(t, "allgatherv", "tensor");
  if (t.dim() == 0) throw_invalid_argument("allgatherv: needs a tensor with at least one dimension");
  // First learn every rank's row count, then gather the rows.
  const int64_t rows = t.size(0);
  std::vector<int64_t> all_rows(comm.size());
  AllgatherOptions counts;
  counts.input = &rows;
  counts.output = all_rows.data();
  counts.count = 1;
  counts.dtype = DataType::kInt64;
  counts.tag = tag;
  counts.timeout = timeout;
  allgather(comm, counts);
  const int64_t row_elems = t.dim() > 1 ? t[0].numel() : 1;
  int64_t total_rows = 0;
  std::vector<size_t> elems(comm.size());
  for (int r = 0; r < comm.size(); ++r) {
    total_rows += all_rows[r];
    elems[r] = static_cast<size_t>(all_rows[r] * row_elems);
  }
  std::vector<int64_t> shape{total_rows};
  for (int64_t d = 1; d < t.dim(); ++d) shape.push_back(t.size(d));
  at::Tensor out = at::empty(shape, host_options(t));
  const at::Tensor h = on_host(t);
  AllgathervOptions o;
  o.input = h.data_ptr();
  o.output = out.data_ptr();
  o.counts = elems;
  o.dtype = dtype_of(t);
  o.tag = tag;
  o.timeout = timeout;
  allgatherv(comm, o);
  return out.to(t.device());
}

void reduce_scatter(Communicator& comm, const at::Tensor& input, at::Tensor& output, ReduceOp op,
                    Millis timeout, std::uint32_t tag) {
  check_usable(input, "reduce_scatter", "input");
  check_usable(output, "reduce_scatter", "output");
  if (input.scalar_type() != output.scalar_type()) {
    throw_invalid_argument("reduce_scatter: input is " + std::string(c10::toString(input.scalar_type())) +
                           " but output is " + c10::toString(output.scalar_type()));
  }
  if (input.numel() != output.numel() * comm.size()) {
    throw_invalid_argument("reduce_scatter: input " + shape_of(input) + " must hold size (" +
                           std::to_string(comm.size()) + ") x output " + shape_of(output) +
                           " elements");
  }
  // The count is the output's; the dtype is the same on both (checked above).
  auto o = options_for<ReduceScatterOptions>(output, tag, timeout);
  const at::Tensor hin = on_host(input);
  at::Tensor hout = on_host(output);
  o.input = hin.data_ptr();
  o.output = hout.data_ptr();
  o.op = op;
  reduce_scatter(comm, o);
  write_back(output, hout);
}

void send(Communicator& comm, const at::Tensor& t, int peer, std::uint32_t tag, Millis timeout) {
  check_usable(t, "send", "tensor");
  const at::Tensor h = on_host(t);
  auto o = options_for<SendOptions>(t, tag, timeout);
  o.data = h.data_ptr();
  o.peer = peer;
  send(comm, o);
}

void recv(Communicator& comm, at::Tensor& t, int peer, std::uint32_t tag, Millis timeout) {
  check_usable(t, "recv", "tensor");
  at::Tensor h = on_host(t);
  auto o = options_for<RecvOptions>(t, tag, timeout);
  o.data = h.data_ptr();
  o.peer = peer;
  recv(comm, o);
  write_back(t, h);
}

}  // namespace hpct::comm
