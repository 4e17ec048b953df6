#include "train/validation.h"

#include <algorithm>
#include <cstdio>

#include "data/formats/crc32c.h"
#include "train/train_setup.h"

namespace hpct::train {

std::unique_ptr<data::Loader> open_validation_loader(const data::LoaderOptions& train,
                                                     const std::vector<std::string>& shards, int rank, int size) {
  if (shards.empty()) return nullptr;
  data::LoaderOptions vo = train;
  vo.shards = shards;
  vo.shuffle = false;
  vo.drop_last = false;
  vo.rank = rank;
  vo.size = size;
  return std::make_unique<data::Loader>(vo);
}

std::uint32_t model_checksum(Model& model) {
  std::uint32_t crc = 0;
  auto add = [&](const torch::Tensor& t) {
    auto c = t.detach().to(torch::kCPU).contiguous();  // a GPU's tensors are summed from a host copy
    crc = data::crc32c(c.data_ptr(), static_cast<size_t>(c.nbytes()), crc);
  };
  for (const auto& p : model.parameters()) add(p);
  for (const auto& b : model.buffers()) add(b);
  return crc;
}

void average_buffers(Context& ctx, Model& model) {
  torch::NoGradGuard no_grad;
  for (auto& item : model.named_buffers()) {
    auto& b = item.value();
    if (!b.is_floating_point()) continue;  // counters (num_batches_tracked) advance alike everywhere
    b.copy_(allreduce(ctx, "train/buffer/" + item.key(), b, true));
  }
}

void validate(Context& ctx, Model& model, const std::string& name, data::Loader& val, double* loss,
              double* accuracy) {
  average_buffers(ctx, model);
  model.eval();
  torch::NoGradGuard no_grad;
  val.start_epoch(0);
  data::Batch b;
  double loss_sum = 0, correct = 0, count = 0;
  while (val.next(&b)) {
    auto out = logits(model, name, b.images);
    loss_sum += classification_loss(name, out, b.labels,
                                    torch::nn::functional::CrossEntropyFuncOptions().reduction(torch::kSum),
                                    b.max_label)
                    .item<double>();
    correct += out.argmax(1).eq(b.labels).sum().item<double>();
    count += static_cast<double>(b.labels.size(0));
  }
  auto t = allreduce(ctx, "train/val", torch::tensor({loss_sum, correct, count}, torch::kDouble), false);
  *loss = t[0].item<double>() / std::max(1.0, t[2].item<double>());
  *accuracy = t[1].item<double>() / std::max(1.0, t[2].item<double>());
  model.train();
}

ParameterCheck check_parameters(Context& ctx, Model& model) {
  average_buffers(ctx, model);
  auto crcs = torch::zeros({ctx.size()}, torch::kDouble);
  crcs[ctx.rank()] = static_cast<double>(model_checksum(model));
  crcs = allreduce(ctx, "train/param_crc", crcs, false);
  ParameterCheck c;
  c.identical = (crcs == crcs[0]).all().item<bool>();
  char crc_hex[16];
  std::snprintf(crc_hex, sizeof crc_hex, "%08x", static_cast<unsigned>(crcs[0].item<double>()));
  c.crc_hex = crc_hex;
  return c;
}

}  // namespace hpct::train
