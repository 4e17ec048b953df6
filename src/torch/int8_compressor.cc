#include "torch/int8_compressor.h"

#include "core/error.h"

namespace hpct {
namespace {
constexpr float kTinyScale = 1e-30f;
}  // namespace

bool Int8Compressor::compresses(const torch::Tensor& grad, int) const {
  if (grad.scalar_type() != torch::kFloat || grad.numel() < spec_.int8_chunk) return false;
  const double n = static_cast<double>(grad.numel());
  const double chunks = std::ceil(n / static_cast<double>(spec_.int8_chunk));
  return 4 * n / (n + 4 * chunks) >= spec_.min_rate;  // float32 bytes / (int8 + scales)
}

void Int8Compressor::reduce_compressed(engine::Engine& engine, std::vector<GradSlot*>& slots, bool average) {
  const int ranks = engine.size();
  if (ranks > kMaxRanks) {
    throw_invalid_argument("int8 compression works up to " + std::to_string(kMaxRanks) + " ranks (this job has " +
                           std::to_string(ranks) + "): use powersgd or fp16");
  }
  const float lv = static_cast<float>(levels(ranks));
  const std::int64_t chunk = spec_.int8_chunk;
  struct Work {
    torch::Tensor x, padded, scale, q, e;
    std::int64_t n = 0;
    std::string name;
  };
  std::vector<Work> work;
  work.reserve(slots.size());
  std::vector<engine::Handle> hs;
  for (GradSlot* g : slots) {
    Work w;
    w.name = g->name;
    g->grad.add_(residual(*g));  // X = G + E
    w.e = residual(*g).view({-1});
    w.x = g->grad.view({-1});
    w.n = w.x.numel();
    const std::int64_t chunks = (w.n + chunk - 1) / chunk;
    if (chunks * chunk == w.n) {
      w.padded = w.x.view({chunks, chunk});
    } else {
      w.padded = torch::zeros({chunks, chunk}, w.x.options());  // on the gradient's device
      w.padded.view({-1}).narrow(0, 0, w.n).copy_(w.x);
    }
    w.scale = w.padded.abs().amax(1);
    hs.push_back(submit_allreduce(engine, "int8/scale/" + g->name, w.scale, comm::ReduceOp::kMax,
                                  engine::Compression::kNone));
    work.push_back(std::move(w));
  }
  wait_all(hs);
  for (auto& w : work) {
    // A chunk of zeros (a dead unit's row) has scale 0 or a denormal one
    // whose inverse overflows to inf (and 0 x inf is NaN): below kTinyScale
    // it sends zeros and its values stay in the residual.
    auto inv = torch::where(w.scale > kTinyScale, lv / w.scale.clamp_min(kTinyScale), torch::zeros_like(w.scale))
                   .unsqueeze(1);
    auto qf = (w.padded * inv).round_().clamp_(-lv, lv);
    w.q = qf.to(torch::kChar);
    auto step = (w.scale / lv).unsqueeze(1);
    qf.mul_(step);  // what this rank sent, as floats
    torch::sub_out(w.e, w.x, qf.view({-1}).narrow(0, 0, w.n));
    hs.push_back(submit_allreduce(engine, "int8/q/" + w.name, w.q, comm::ReduceOp::kSum));
  }
  wait_all(hs);
  const float divisor = average ? static_cast<float>(ranks) : 1.0f;
  for (auto& w : work) {
    auto step = (w.scale / (lv * divisor)).unsqueeze(1);
    auto sum = w.q.to(torch::kFloat).mul_(step);
    w.x.copy_(sum.view({-1}).narrow(0, 0, w.n));
  }
}

}  // namespace hpct
