// allreduce of metrics (loss, accuracy, counts): tensors or single numbers.
#include <torch/torch.h>

#include "engine/engine.h"
#include "torch/context.h"

namespace hpct {

torch::Tensor allreduce(Context& ctx, const std::string& name, const torch::Tensor& value,
                        bool average) {
  torch::Tensor t = value.detach().to(torch::kCPU).contiguous().clone();
  auto op = average ? comm::ReduceOp::kAvg : comm::ReduceOp::kSum;
  if (average && !t.is_floating_point()) t = t.to(torch::kDouble);
  ctx.engine().allreduce_async("metric/" + name, tensor_ref(t, "metric " + name), op).wait();
  return t;
}

double allreduce(Context& ctx, const std::string& name, double value, bool average) {
  torch::Tensor t = torch::tensor({value}, torch::kDouble);
  return allreduce(ctx, name, t, average).item<double>();
}

}  // namespace hpct
