#include "train/train_setup.h"

#include <sstream>

#include "data/loader.h"
#include "train/scripted_model.h"

namespace hpct::train {

double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

std::unique_ptr<torch::optim::Optimizer> make_optimizer(const TrainOptions& o, Model& model) {
  if (o.optimizer == "sgd") {
    return std::make_unique<torch::optim::SGD>(
        model.parameters(),
        torch::optim::SGDOptions(o.lr).momentum(o.momentum).weight_decay(o.weight_decay));
  }
  if (o.optimizer == "adam") {
    return std::make_unique<torch::optim::Adam>(
        model.parameters(), torch::optim::AdamOptions(o.lr).weight_decay(o.weight_decay));
  }
  throw_invalid_argument("--optimizer " + o.optimizer + ": choose sgd or adam");
}

void set_lr(torch::optim::Optimizer& opt, double lr) {
  for (auto& g : opt.param_groups()) g.options().set_lr(lr);
}

torch::Tensor probe_sample(const TrainOptions& o, const Logger& log, std::shared_ptr<data::FileSystem> fs,
                           const Config& config) {
  data::LoaderOptions lo;
  lo.shards = o.data;
  lo.fs = std::move(fs);
  lo.on_error = data::parse_on_error(config.data_on_error);  // a shard skipped in training is skipped here too
  lo.batch_size = 1;
  lo.shuffle = false;
  lo.threads = 1;
  lo.prefetch = 1;
  lo.normalize = true;  // as training sees it
  lo.logger = log;
  data::Loader probe(lo);
  data::Batch b;
  // peek: a remote file system fetches this sample's bytes, not its shard.
  if (!probe.peek(&b) && !probe.next(&b)) throw_invalid_argument("the training shards hold no samples");
  return b.images;
}

std::string shape_of(const torch::Tensor& t) {
  std::ostringstream s;
  s << t.sizes() << " " << t.dtype();
  return s.str();
}

std::string error_summary(const std::exception& e) {
  const auto* c = dynamic_cast<const c10::Error*>(&e);
  std::string s = c ? c->what_without_backtrace() : e.what();
  const std::string marker = "\nRuntimeError: ";
  auto pos = s.rfind(marker);
  if (pos != std::string::npos) s = s.substr(pos + marker.size());
  return s.substr(0, s.find('\n'));
}

torch::Tensor logits(Model& model, const std::string& name, const torch::Tensor& x) {
  torch::Tensor out;
  try {
    out = model.forward(x);
  } catch (const Error&) {
    throw;
  } catch (const std::exception& e) {
    throw_invalid_argument("--model " + name + ": forward failed on a batch of shape " + shape_of(x) + ": " +
                           error_summary(e));
  }
  if (out.dim() != 2 || out.size(0) != x.size(0) || !out.is_floating_point()) {
    throw_invalid_argument("--model " + name + ": forward on a batch of shape " + shape_of(x) +
                           " returned " + shape_of(out) + "; expected float logits [" +
                           std::to_string(x.size(0)) + ", classes]");
  }
  return out;
}

torch::Tensor classification_loss(const std::string& name, const torch::Tensor& out, const torch::Tensor& labels,
                                  torch::nn::functional::CrossEntropyFuncOptions opts, std::int64_t max_label) {
  const std::int64_t top = max_label >= 0 ? max_label : labels.max().item<std::int64_t>();
  if (top >= out.size(1)) {
    throw_invalid_argument("--model " + name + ": it outputs " + std::to_string(out.size(1)) +
                           " classes, the data has label " + std::to_string(top));
  }
  return torch::nn::functional::cross_entropy(out, labels, opts);
}

std::shared_ptr<Model> open_probed_model(const TrainOptions& o, const torch::Tensor& sample) {
  auto model = open_model(o.model, static_cast<int>(sample.size(1)));
  {
    model->eval();
    torch::NoGradGuard no_grad;
    logits(*model, o.model, sample);
    model->train();
  }
  return model;
}

}  // namespace hpct::train
