#include "runtime.h"

#include <algorithm>

#include "comm/tensor.h"
#include "core/error.h"
#include "engine/message.h"
#include "torch/context.h"

namespace hpct::py {

torch::Tensor Operation::wait() const {
  handle_.wait();
  if (gathered_) return *gathered_;
  return output_;
}

Runtime::Runtime() : ctx_(init()) {}

Runtime::~Runtime() { shutdown(); }

Context& Runtime::live() {
  if (!ctx_) throw_invalid_argument("hpctrain.torch was shut down; call hvd.init() again first");
  return *ctx_;
}

int Runtime::rank() const { return ctx_ ? ctx_->rank() : 0; }
int Runtime::size() const { return ctx_ ? ctx_->size() : 1; }
int Runtime::local_rank() const { return ctx_ ? ctx_->local_rank() : 0; }
int Runtime::local_size() const { return ctx_ ? ctx_->local_size() : 1; }
Context& Runtime::context() { return live(); }

bool Runtime::overlap_default() const { return overlap_from_config(*ctx_); }

Operation Runtime::allreduce(const torch::Tensor& t, const std::string& name,
                             const std::string& op, const std::string& compression) {
  std::optional<engine::Compression> c;
  if (!compression.empty()) c = engine::parse_compression(compression);
  auto h = live().engine().allreduce_async(name, tensor_ref(t, "tensor " + name),
                                           comm::parse_reduce_op(op), c);
  return Operation(std::move(h), t);
}

Operation Runtime::allgather(const torch::Tensor& t, const std::string& name) {
  auto out = std::make_shared<torch::Tensor>();
  const auto options = t.options();
  auto h = live().engine().allgather_async(
      name, tensor_ref(t, "tensor " + name),
      [out, options](const std::vector<std::int64_t>& shape) {
        *out = torch::empty(shape, options);
        return out->data_ptr();
      });
  return Operation(std::move(h), torch::Tensor(), out);
}

Operation Runtime::broadcast(const torch::Tensor& t, const std::string& name, int root) {
  if (root < 0 || root >= size()) {
    throw_invalid_argument("broadcast of " + name + ": root rank " + std::to_string(root) +
                           " is not in 0.." + std::to_string(size() - 1));
  }
  auto h = live().engine().broadcast_async(name, tensor_ref(t, "tensor " + name), root);
  return Operation(std::move(h), t);
}

void Runtime::shutdown() { ctx_.reset(); }

}  // namespace hpct::py
