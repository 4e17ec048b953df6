#include "torch/powersgd.h"

namespace hpct {
namespace {

// The matrix view of a gradient: first dimension by the rest.
std::pair<std::int64_t, std::int64_t> matrix_shape(const torch::Tensor& t) {
  const std::int64_t n = t.size(0);
  return {n, n > 0 ? t.numel() / n : 0};
}

// FNV-1a: a seed from a name that is the same in every build and process
// (std::hash is not promised to be).
std::uint64_t name_hash(const std::string& s) {
  std::uint64_t h = 1469598103934665603ull;
  for (unsigned char c : s) {
    h ^= c;
    h *= 1099511628211ull;
  }
  return h;
}

}  // namespace

bool PowerSgd::compresses(const torch::Tensor& grad, int) const {
  if (grad.scalar_type() != torch::kFloat || grad.dim() < 2) return false;
  const auto [n, m] = matrix_shape(grad);
  if (n == 0 || m == 0) return false;
  const double r = spec_.rank;
  return static_cast<double>(n) * static_cast<double>(m) / (r * static_cast<double>(n + m)) >= spec_.min_rate;
}

void PowerSgd::orthogonalise(torch::Tensor& p) {
  // Rows of the transpose are P's columns: contiguous for the dot products.
  auto cols = p.t().contiguous();
  const std::int64_t r = cols.size(0);
  for (std::int64_t i = 0; i < r; ++i) {
    auto c = cols[i];
    for (std::int64_t j = 0; j < i; ++j) {
      auto prev = cols[j];
      c.sub_(prev * torch::dot(prev, c));
    }
    // The epsilon keeps a zero column (a zero gradient) zero instead of NaN.
    c.div_(c.norm() + 1e-8f);
  }
  p.copy_(cols.t());
}

torch::Tensor& PowerSgd::q_for(const GradSlot& g, std::int64_t m) {
  torch::Tensor& q = buffers_["q/" + g.name];
  if (!q.defined()) {
    // Drawn on the CPU (the same bits on every rank, whatever its device),
    // then kept on the gradient's device with the rest of the state.
    auto gen = at::detail::createCPUGenerator(spec_.seed ^ name_hash(g.name));
    q = torch::randn({m, spec_.rank}, gen, torch::kFloat).to(g.grad.device());
  } else if (q.device() != g.grad.device()) {
    q = q.to(g.grad.device());  // loaded from a checkpoint onto the CPU
  }
  return q;
}

void PowerSgd::reduce_compressed(engine::Engine& engine, std::vector<GradSlot*>& slots, bool average) {
  struct Work {
    torch::Tensor m, p, q, e;
    std::string name;
  };
  std::vector<Work> work;
  work.reserve(slots.size());
  std::vector<engine::Handle> hs;
  for (GradSlot* g : slots) {
    const auto [n, m] = matrix_shape(g->grad);
    Work w;
    w.name = g->name;
    g->grad.add_(residual(*g));  // M = G + E, in the gradient's own memory
    w.e = residual(*g).view({n, m});
    w.m = g->grad.view({n, m});
    w.q = q_for(*g, m);
    w.p = torch::mm(w.m, w.q);
    hs.push_back(submit_allreduce(engine, "powersgd/p/" + g->name, w.p, comm::ReduceOp::kSum,
                                  engine::Compression::kNone));
    work.push_back(std::move(w));
  }
  wait_all(hs);
  const auto op = average ? comm::ReduceOp::kAvg : comm::ReduceOp::kSum;
  for (auto& w : work) {
    orthogonalise(w.p);
    // Q = M^T P, computed as (P^T M)^T: torch 2.15's MKL multiplies a
    // transposed wide M by a thin P 12x slower (136 ms against 11 ms for
    // 4096x4096 by 4, one thread, AMD EPYC; docs/compression.md).
    w.q.copy_(torch::mm(w.p.t(), w.m).t());
    hs.push_back(submit_allreduce(engine, "powersgd/q/" + w.name, w.q, op, engine::Compression::kNone));
  }
  wait_all(hs);
  for (auto& w : work) {
    auto qt = w.q.t();
    torch::addmm_out(w.e, w.m, w.p, qt, 1, -1);  // E = M - P Q^T, this rank's own
    torch::mm_out(w.m, w.p, qt);                 // G = P Q^T, identical on every rank
  }
}

}  // namespace hpct
