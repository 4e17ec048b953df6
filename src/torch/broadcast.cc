// broadcast_parameters and broadcast_optimizer_state: the same starting point
// on every rank.
#include <torch/torch.h>

#include "engine/engine.h"
#include "torch/context.h"
#include "torch/gradient_compressor.h"

namespace hpct {
namespace {

// Broadcasts every tensor of `named` from root in place; non-contiguous
// tensors travel through a contiguous copy.
void broadcast_all(Context& ctx, const std::string& prefix,
                   const std::vector<std::pair<std::string, torch::Tensor>>& named, int root) {
  torch::NoGradGuard no_grad;
  std::vector<engine::Handle> hs;
  std::vector<std::pair<torch::Tensor, torch::Tensor>> copies;  // (target, contiguous copy)
  for (const auto& [name, t] : named) {
    torch::Tensor send = t.is_contiguous() ? t : t.contiguous();
    if (!send.is_same(t)) copies.emplace_back(t, send);
    hs.push_back(ctx.engine().broadcast_async(prefix + name, tensor_ref(send, prefix + name), root));
  }
  wait_all(hs);
  for (auto& [target, copy] : copies) target.copy_(copy);
}

}  // namespace

void broadcast_parameters(Context& ctx, torch::nn::Module& module, int root) {
  std::vector<std::pair<std::string, torch::Tensor>> named;
  for (const auto& p : module.named_parameters()) named.emplace_back(p.key(), p.value());
  for (const auto& b : module.named_buffers()) named.emplace_back(b.key(), b.value());
  broadcast_all(ctx, "bcast/module/", named, root);
}

void broadcast_optimizer_state(Context& ctx, torch::optim::Optimizer& optimizer, int root) {
  // The optimizer's own serialization carries its state and its param
  // groups' options whatever optimizer it is; root's bytes go to every rank.
  std::string bytes;
  if (ctx.rank() == root) {
    torch::serialize::OutputArchive out;
    optimizer.save(out);
    out.save_to([&](const void* data, std::size_t n) {
      bytes.append(static_cast<const char*>(data), n);
      return n;
    });
  }
  torch::Tensor len = torch::tensor({static_cast<std::int64_t>(bytes.size())}, torch::kLong);
  ctx.engine().broadcast_async("bcast/optimizer/length", tensor_ref(len, "optimizer state length"), root)
      .wait();
  torch::Tensor blob = torch::empty({len.item<std::int64_t>()}, torch::kByte);
  if (ctx.rank() == root && !bytes.empty()) std::memcpy(blob.data_ptr(), bytes.data(), bytes.size());
  ctx.engine().broadcast_async("bcast/optimizer/state", tensor_ref(blob, "optimizer state"), root).wait();
  if (ctx.rank() != root) {
    torch::serialize::InputArchive in;
    in.load_from(static_cast<const char*>(blob.data_ptr()), static_cast<std::size_t>(blob.numel()));
    optimizer.state().clear();  // root's state replaces ours, also where root has none
    optimizer.load(in);
    // libtorch 1.13's load() restores the state but drops the saved param
    // group options (lr, momentum, ...); read them from the same archive.
    torch::serialize::InputArchive groups;
    in.read("param_groups", groups);
    for (std::size_t i = 0; i < optimizer.param_groups().size(); ++i) {
      torch::serialize::InputArchive group, options;
      groups.read("param_groups/" + std::to_string(i), group);
      group.read("options", options);
      optimizer.param_groups()[i].options().serialize(options);
    }
  }
}

}  // namespace hpct
