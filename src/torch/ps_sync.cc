#include "torch/ps_sync.h"

#include "core/config.h"
#include "core/env.h"
#include "core/error.h"
#include "ps/job.h"

namespace hpct {
namespace {

comm::DataType ps_dtype(const torch::Tensor& t, const std::string& name) {
  switch (t.scalar_type()) {
    case torch::kFloat: return comm::DataType::kFloat32;
    case torch::kDouble: return comm::DataType::kFloat64;
    default:
      throw_invalid_argument("parameter " + name + " is " + std::string(c10::toString(t.scalar_type())) +
                             "; the parameter servers move float32 and float64 tensors");
  }
}

}  // namespace

PsSync::PsSync(Context& ctx, ps::Mode mode, int staleness, const std::vector<std::string>& names,
               std::vector<torch::Tensor> params)
    : params_(std::move(params)) {
  ProcessEnv env;
  const Config& config = ctx.config();
  ps::JobRole role = ps::job_role(env);
  if (role.servers < 1) {
    throw_invalid_argument(std::string("--sync ") + (mode == ps::Mode::kSync ? "ps" : "ps-async") +
                           " needs parameter servers: start the job with `hpctrain launch --servers K "
                           "...`");
  }
  std::string secret;
  auto store = ps::open_job_store(config, env, &secret);
  const Millis timeout = seconds_to_millis(config.timeout_s);
  ps::ClientOptions o;
  o.rank = ctx.rank();
  o.num_workers = ctx.size();
  o.servers = ps::find_servers(*store, role.servers, timeout);
  o.secret = secret;
  o.host_name = role.host;
  o.mac_frames = config.ps_frame_mac;
  o.mode = mode;
  o.staleness = staleness;
  o.piece_bytes = static_cast<std::uint64_t>(config.ps_piece_bytes);
  o.push_window = static_cast<int>(config.ps_push_window);
  o.timeout = timeout;
  o.connect_timeout = timeout;
  client_ = std::make_unique<ps::Client>(o);
  std::vector<ps::TensorSpec> specs;
  for (size_t i = 0; i < params_.size(); ++i) {
    auto& p = params_[i];
    if (!p.is_contiguous()) {
      throw_invalid_argument("parameter " + names[i] + " is not contiguous; the parameter servers "
                             "read and write parameters in place");
    }
    specs.push_back({names[i], ps_dtype(p, names[i]), static_cast<std::uint64_t>(p.numel())});
  }
  client_->register_tensors(specs, mode == ps::Mode::kAsync ? param_ptrs() : std::vector<void*>{});
}

PsSync::~PsSync() = default;

std::vector<void*> PsSync::param_ptrs() {
  std::vector<void*> out;
  for (auto& p : params_) out.push_back(p.data_ptr());
  return out;
}

void PsSync::exchange_gradients(bool average) {
  std::vector<const void*> in;
  std::vector<void*> out;
  std::vector<torch::Tensor> grads;
  for (auto& p : params_) {
    torch::Tensor& g = p.mutable_grad();
    if (!g.defined()) {
      g = torch::zeros_like(p, torch::MemoryFormat::Contiguous);
    } else if (!g.is_contiguous()) {
      g = g.contiguous();
    }
    grads.push_back(g);
    in.push_back(g.data_ptr());
    out.push_back(g.data_ptr());
  }
  int count = client_->exchange(in, out);
  if (average && count > 1) {
    torch::NoGradGuard no_grad;
    for (auto& g : grads) g.div_(count);
  }
}

void PsSync::before_step() {
  torch::NoGradGuard no_grad;
  if (old_.empty()) {
    for (auto& p : params_) old_.push_back(p.detach().clone());
  } else {
    for (size_t i = 0; i < params_.size(); ++i) old_[i].copy_(params_[i]);
  }
}

void PsSync::after_step() {
  torch::NoGradGuard no_grad;
  std::vector<const void*> in;
  for (size_t i = 0; i < params_.size(); ++i) {
    // old_ becomes the update: new - old.
    torch::sub_out(old_[i], params_[i].detach(), old_[i]);
    in.push_back(old_[i].data_ptr());
  }
  client_->exchange(in, param_ptrs());
}

void PsSync::end_epoch() {
  client_->leave(client_->mode() == ps::Mode::kAsync ? param_ptrs() : std::vector<void*>{});
}

}  // namespace hpct
