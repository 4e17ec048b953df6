#include "torch/gradient_compressor.h"

#include <cstring>
#include <exception>

#include "core/error.h"
#include "torch/context.h"
#include "torch/int8_compressor.h"
#include "torch/powersgd.h"

namespace hpct {

std::string LossySpec::name() const {
  return kind == Kind::kInt8 ? std::string("int8") : "powersgd:" + std::to_string(rank);
}

std::optional<LossySpec> parse_lossy(const std::string& text) {
  if (!engine::is_lossy_compression(text)) return std::nullopt;
  LossySpec s;
  if (text == "int8") {
    s.kind = LossySpec::Kind::kInt8;
    return s;
  }
  s.kind = LossySpec::Kind::kPowerSgd;
  if (text != "powersgd") {
    const std::string r = text.substr(std::string("powersgd:").size());
    if (r.empty() || r.size() > 4 || r.find_first_not_of("0123456789") != std::string::npos ||
        std::stoi(r) < 1 || std::stoi(r) > 1024) {
      throw_invalid_argument("compression '" + text + "': the rank after powersgd: must be a whole number " +
                             "from 1 to 1024 (e.g. powersgd:4)");
    }
    s.rank = std::stoi(r);
  }
  return s;
}

engine::Handle submit_allreduce(engine::Engine& engine, const std::string& name, const torch::Tensor& t,
                                comm::ReduceOp op, std::optional<engine::Compression> wire) {
  return engine.allreduce_async(name, tensor_ref(t, name), op, wire);
}

void wait_all(std::vector<engine::Handle>& handles) {
  std::exception_ptr first;
  for (auto& h : handles) {
    try {
      h.wait();
    } catch (...) {
      if (!first) first = std::current_exception();
    }
  }
  handles.clear();
  if (first) std::rethrow_exception(first);
}

void GradientCompressor::reduce(engine::Engine& engine, std::vector<GradSlot>& grads, bool average) {
  const auto op = average ? comm::ReduceOp::kAvg : comm::ReduceOp::kSum;
  std::vector<engine::Handle> plain;
  std::vector<GradSlot*> lossy;
  const bool started = step_ >= spec_.start_step;
  try {
    for (auto& g : grads) {
      if (started && compresses(g.grad, engine.size())) {
        lossy.push_back(&g);
      } else {
        // The same name as DistributedOptimizer's plain path: a checkpoint
        // or a warm-up step looks to the engine like uncompressed training.
        plain.push_back(submit_allreduce(engine, "grad/" + g.name, g.grad, op));
      }
    }
    if (!lossy.empty()) {
      torch::NoGradGuard no_grad;
      reduce_compressed(engine, lossy, average);
    }
  } catch (...) {
    try {
      wait_all(plain);
    } catch (...) {
    }
    throw;
  }
  wait_all(plain);
  ++step_;
}

torch::Tensor& GradientCompressor::residual(const GradSlot& g) {
  torch::Tensor& e = buffers_["error/" + g.name];
  if (!e.defined() || !spec_.error_feedback) {
    e = torch::zeros_like(g.grad);
  } else if (e.device() != g.grad.device()) {
    e = e.to(g.grad.device());  // loaded from a checkpoint onto the CPU: to the gradient's device, once
  }
  return e;
}

namespace {

torch::Tensor string_tensor(const std::string& s) {
  auto t = torch::empty({static_cast<std::int64_t>(s.size())}, torch::kUInt8);
  if (!s.empty()) std::memcpy(t.data_ptr(), s.data(), s.size());
  return t;
}

bool is_residual(const std::string& key) { return key.rfind("error/", 0) == 0; }

std::string tensor_string(const torch::Tensor& t) {
  auto c = t.contiguous();
  return std::string(static_cast<const char*>(c.data_ptr()), static_cast<std::size_t>(c.numel()));
}

}  // namespace

// Keys are indexes, not names: parameter names hold dots, which a libtorch
// archive reads as nesting. The names are stored beside them.
void GradientCompressor::save(torch::serialize::OutputArchive& ar, bool residuals) const {
  ar.write("mode", string_tensor(spec_.name()));
  ar.write("step", torch::tensor({step_}, torch::kLong));
  std::int64_t count = 0;
  for (const auto& [name, t] : buffers_) count += residuals || !is_residual(name);
  ar.write("count", torch::tensor({count}, torch::kLong));
  std::int64_t i = 0;
  for (const auto& [name, t] : buffers_) {
    if (!residuals && is_residual(name)) continue;
    ar.write("name/" + std::to_string(i), string_tensor(name));
    ar.write("value/" + std::to_string(i), t);
    ++i;
  }
}

std::string saved_compression_mode(torch::serialize::InputArchive& ar) {
  torch::Tensor t;
  ar.read("mode", t);
  return tensor_string(t);
}

void GradientCompressor::load(torch::serialize::InputArchive& ar) {
  torch::Tensor t;
  const std::string mode = saved_compression_mode(ar);
  if (mode != spec_.name()) {
    throw_invalid_argument("the checkpoint's compression state is " + mode + ", this run compresses with " +
                           spec_.name() + ": resume with --compression " + mode);
  }
  ar.read("step", t);
  const std::int64_t step = t.item<std::int64_t>();
  ar.read("count", t);
  const std::int64_t count = t.item<std::int64_t>();
  std::map<std::string, torch::Tensor> loaded;
  for (std::int64_t i = 0; i < count; ++i) {
    const std::string k = std::to_string(i);
    torch::Tensor name, value;
    ar.read("name/" + k, name);
    ar.read("value/" + k, value);
    loaded[tensor_string(name)] = value.contiguous().clone();
  }
  buffers_ = std::move(loaded);
  step_ = step;
}

void GradientCompressor::drop_residuals() {
  for (auto it = buffers_.begin(); it != buffers_.end();) {
    it = is_residual(it->first) ? buffers_.erase(it) : std::next(it);
  }
}

std::unique_ptr<GradientCompressor> make_gradient_compressor(const LossySpec& spec) {
  if (spec.kind == LossySpec::Kind::kInt8) return std::make_unique<Int8Compressor>(spec);
  return std::make_unique<PowerSgd>(spec);
}

}  // namespace hpct
