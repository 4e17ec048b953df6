#include "core/config.h"
#include "train/trainer.h"

#include <torch/torch.h>

#include <ATen/CPUGeneratorImpl.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <mutex>
#include <sstream>

#include <signal.h>
#include <unistd.h>

#include "core/clock.h"
#include "core/env.h"
#include "core/error.h"
#include "core/world.h"
#include "data/formats/crc32c.h"
#include "data/loader.h"
#include "data/source/remote_fs.h"
#include "elastic/elastic.h"
#include "engine/engine.h"
#include "metrics/rank_metrics.h"
#include "train/checkpoint.h"
#include "train/models.h"
#include "train/scripted_model.h"

namespace hpct::train {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

torch::Tensor bytes_tensor(const std::string& s) {
  return torch::from_blob(const_cast<char*>(s.data()), {static_cast<std::int64_t>(s.size())},
                          torch::kUInt8)
      .clone();
}

std::string tensor_bytes(const torch::Tensor& t) {
  auto c = t.to(torch::kUInt8).contiguous();
  return std::string(reinterpret_cast<const char*>(c.data_ptr()), static_cast<size_t>(c.numel()));
}

// Every rank's bytes on every rank, through the engine's allgather (byte
// rows; each rank sends its length first, so an empty string is one row).
std::vector<std::string> gather_bytes(Context& ctx, const std::string& name, const std::string& mine) {
  std::string framed(8, '\0');
  const std::uint64_t len = mine.size();
  std::memcpy(framed.data(), &len, 8);
  framed += mine;
  engine::TensorRef t;
  t.data = framed.data();
  t.dtype = comm::DataType::kUInt8;
  t.shape = {static_cast<std::int64_t>(framed.size())};
  auto h = ctx.engine().allgather_async(name, t);
  h.wait();
  const auto& all = h.gathered();
  std::vector<std::string> out;
  std::size_t off = 0;
  for (int r = 0; r < ctx.size(); ++r) {
    std::uint64_t n = 0;
    if (off + 8 > all.size()) throw_data_corrupt(name + ": rank " + std::to_string(r) + "'s bytes are cut short");
    std::memcpy(&n, all.data() + off, 8);
    off += 8;
    if (off + n > all.size()) throw_data_corrupt(name + ": rank " + std::to_string(r) + "'s bytes are cut short");
    out.emplace_back(reinterpret_cast<const char*>(all.data() + off), n);
    off += n;
  }
  return out;
}

std::string rng_state() {
  auto gen = at::detail::getDefaultCPUGenerator();
  std::lock_guard<std::mutex> lock(gen.mutex());
  return tensor_bytes(gen.get_state());
}

void set_rng_state(const std::string& bytes) {
  auto gen = at::detail::getDefaultCPUGenerator();
  std::lock_guard<std::mutex> lock(gen.mutex());
  gen.set_state(bytes_tensor(bytes));
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

// CRC-32C over every parameter and buffer, in module order.
std::uint32_t model_checksum(Model& model) {
  std::uint32_t crc = 0;
  auto add = [&](const torch::Tensor& t) {
    auto c = t.detach().contiguous();
    crc = data::crc32c(c.data_ptr(), static_cast<size_t>(c.nbytes()), crc);
  };
  for (const auto& p : model.parameters()) add(p);
  for (const auto& b : model.buffers()) add(b);
  return crc;
}

// Batch-norm statistics (and any other buffer) averaged over ranks, so
// every rank evaluates and saves the same model. Parameters are left alone:
// they are identical already, and the final check proves it.
void average_buffers(Context& ctx, Model& model) {
  torch::NoGradGuard no_grad;
  for (auto& item : model.named_buffers()) {
    auto& b = item.value();
    if (!b.is_floating_point()) continue;  // counters (num_batches_tracked) advance alike everywhere
    b.copy_(allreduce(ctx, "train/buffer/" + item.key(), b, true));
  }
}

// One sample of the training data, [1, C, H, W]: its channels shape
// resnet20, and a forward pass on it checks the model fits the data before
// any rank starts training.
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
  if (!probe.next(&b)) throw_invalid_argument("the training shards hold no samples");
  return b.images;
}

std::string shape_of(const torch::Tensor& t) {
  std::ostringstream s;
  s << t.sizes() << " " << t.dtype();
  return s.str();
}

// The message of a libtorch error without its C++ stack; for an error raised
// inside a TorchScript module, the operator's own message after the script's
// traceback.
std::string error_summary(const std::exception& e) {
  const auto* c = dynamic_cast<const c10::Error*>(&e);
  std::string s = c ? c->what_without_backtrace() : e.what();
  const std::string marker = "\nRuntimeError: ";
  auto pos = s.rfind(marker);
  if (pos != std::string::npos) s = s.substr(pos + marker.size());
  return s.substr(0, s.find('\n'));
}

// The model's logits [N, classes] for x. Errors name the model and the
// shapes, never only a libtorch stack.
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

// Cross entropy of the logits, refusing labels the model has no class for.
torch::Tensor classification_loss(const std::string& name, const torch::Tensor& out, const torch::Tensor& labels,
                                  torch::nn::functional::CrossEntropyFuncOptions opts = {}) {
  auto top = labels.max().item<std::int64_t>();
  if (top >= out.size(1)) {
    throw_invalid_argument("--model " + name + ": it outputs " + std::to_string(out.size(1)) +
                           " classes, the data has label " + std::to_string(top));
  }
  return torch::nn::functional::cross_entropy(out, labels, opts);
}

// The final model, written by rank 0, or by every rank when the path holds
// "{rank}" (replaced by the rank): TorchScript for a scripted model, a
// libtorch archive of parameters and buffers for a built-in one.
void save_final_model(Context& ctx, Model& model, std::string path, const Logger& log) {
  auto at = path.find("{rank}");
  if (at == std::string::npos && ctx.rank() != 0) return;
  if (at != std::string::npos) path.replace(at, 6, std::to_string(ctx.rank()));
  if (auto* scripted = dynamic_cast<ScriptedModel*>(&model)) {
    scripted->save_script(path);
  } else {
    torch::serialize::OutputArchive ar;
    model.save(ar);
    try {
      ar.save_to(path);
    } catch (const c10::Error& e) {
      throw_io("save model " + path + " (" + error_summary(e) + ")", errno ? errno : EIO);
    }
  }
  log.info("train", "model saved to " + path);
}

struct Payload {
  std::int64_t step = 0;
  std::int64_t epoch = 0;
  bool epoch_done = false;
  std::string rng;     // this rank's
  std::string loader;  // this rank's
  std::string compression;  // this rank's lossy compression state (residuals, Q); "" without one
};

std::string make_payload(Context& ctx, Model& model, torch::optim::Optimizer& opt, std::int64_t step,
                         std::int64_t epoch, bool epoch_done, const std::vector<std::string>& rngs,
                         const std::vector<std::string>& loaders, const std::vector<std::string>& compressions) {
  torch::serialize::OutputArchive ar;
  torch::serialize::OutputArchive m;
  model.save(m);
  ar.write("model", m);
  torch::serialize::OutputArchive op;
  opt.save(op);
  ar.write("optimizer", op);
  ar.write("step", torch::tensor({step}, torch::kLong));
  ar.write("epoch", torch::tensor({epoch}, torch::kLong));
  ar.write("epoch_done", torch::tensor({epoch_done ? 1 : 0}, torch::kLong));
  ar.write("world_size", torch::tensor({static_cast<std::int64_t>(ctx.size())}, torch::kLong));
  for (int r = 0; r < ctx.size(); ++r) {
    ar.write("rng/" + std::to_string(r), bytes_tensor(rngs[r]));
    ar.write("loader/" + std::to_string(r), bytes_tensor(loaders[r]));
    if (!compressions[r].empty()) ar.write("compression/" + std::to_string(r), bytes_tensor(compressions[r]));
  }
  std::ostringstream ss;
  ar.save_to(ss);
  return ss.str();
}

std::int64_t read_int(torch::serialize::InputArchive& ar, const std::string& key) {
  torch::Tensor t;
  ar.read(key, t);
  return t.item<std::int64_t>();
}

Payload restore_payload(Context& ctx, const std::string& bytes, const std::string& where, Model& model,
                        torch::optim::Optimizer& opt) {
  Payload p;
  try {
    torch::serialize::InputArchive ar;
    std::istringstream ss(bytes);
    ar.load_from(ss);
    auto world = read_int(ar, "world_size");
    if (world != ctx.size()) {
      throw_mismatch(where + ": written by " + std::to_string(world) + " ranks, this job has " +
                     std::to_string(ctx.size()) + " (the data split and RNG states are per rank)");
    }
    torch::serialize::InputArchive m;
    ar.read("model", m);
    model.load(m);
    torch::serialize::InputArchive op;
    ar.read("optimizer", op);
    opt.load(op);
    p.step = read_int(ar, "step");
    p.epoch = read_int(ar, "epoch");
    p.epoch_done = read_int(ar, "epoch_done") != 0;
    torch::Tensor t;
    ar.read("rng/" + std::to_string(ctx.rank()), t);
    p.rng = tensor_bytes(t);
    torch::Tensor l;
    ar.read("loader/" + std::to_string(ctx.rank()), l);
    p.loader = tensor_bytes(l);
    torch::Tensor c;
    if (ar.try_read("compression/" + std::to_string(ctx.rank()), c)) p.compression = tensor_bytes(c);
  } catch (const c10::Error& e) {
    throw_data_corrupt(where + ": checksum matches but libtorch cannot read it as this model's " +
                       "checkpoint: " + e.what_without_backtrace());
  }
  return p;
}

// Loss and accuracy on the validation shards, summed over every rank's part
// (a collective: every rank calls it at the same point). Leaves the model in
// training mode.
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
                                    torch::nn::functional::CrossEntropyFuncOptions().reduction(torch::kSum))
                    .item<double>();
    correct += out.argmax(1).eq(b.labels).sum().item<double>();
    count += static_cast<double>(b.labels.size(0));
  }
  auto t = allreduce(ctx, "train/val", torch::tensor({loss_sum, correct, count}, torch::kDouble), false);
  *loss = t[0].item<double>() / std::max(1.0, t[2].item<double>());
  *accuracy = t[1].item<double>() / std::max(1.0, t[2].item<double>());
  model.train();
}

struct Times {
  double data = 0, compute = 0, sync = 0, optim = 0;
  double total() const { return data + compute + sync + optim; }
};

class MetricsFile {
 public:
  explicit MetricsFile(const std::string& path) {
    if (path.empty()) return;
    out_.open(path, std::ios::app);
    if (!out_) throw_io("open " + path, errno ? errno : EACCES);
  }
  // Adds "time" (Unix seconds) so `hpctrain report` can place the line
  // among the launcher's restart lines and the other runs appended here.
  void write(nlohmann::json j) {
    if (!out_.is_open()) return;
    if (!j.contains("time")) {
      j["time"] = std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
    }
    out_ << j.dump() << '\n' << std::flush;
  }

 private:
  std::ofstream out_;
};

}  // namespace

double learning_rate(const TrainOptions& o, int world_size, double e) {
  double scaled = o.lr;
  if (o.lr_scaling == "linear") {
    scaled = o.lr * static_cast<double>(o.batch * world_size) / static_cast<double>(o.lr_reference_batch);
  } else if (o.lr_scaling != "none") {
    throw_invalid_argument("--lr-scaling " + o.lr_scaling + ": choose linear or none");
  }
  // Goyal et al.'s gradual warmup: from one rank's rate (its batch alone) up
  // to the rate of the global batch.
  double start = scaled / world_size;
  if (o.warmup_epochs > 0 && e < o.warmup_epochs) return start + (scaled - start) * e / o.warmup_epochs;
  double span = std::max(1e-9, o.epochs - o.warmup_epochs);
  double f = std::clamp((e - o.warmup_epochs) / span, 0.0, 1.0);
  if (o.lr_schedule == "cosine") return scaled * 0.5 * (1 + std::cos(M_PI * f));
  if (o.lr_schedule == "step") return scaled * (f < 0.5 ? 1.0 : f < 0.75 ? 0.1 : 0.01);
  if (o.lr_schedule == "constant") return scaled;
  throw_invalid_argument("--lr-schedule " + o.lr_schedule + ": choose cosine, step or constant");
}

nlohmann::json run_training(Context& ctx, const TrainOptions& o, const Logger& log) {
  if (o.data.empty()) throw_invalid_argument("--data: no training shards given");
  if (o.epochs < 1 || o.batch < 1 || o.threads < 1 || o.log_every < 1) {
    throw_invalid_argument("--epochs, --batch, --threads and --log-every must be at least 1");
  }
  if ((o.checkpoint_every > 0 || !o.resume.empty()) && o.checkpoint_dir.empty() &&
      (o.resume.empty() || o.resume == "auto")) {
    throw_invalid_argument("--checkpoint-every and --resume auto need --checkpoint-dir");
  }
  if (o.stop_requested != nullptr && o.checkpoint_dir.empty()) {
    throw_invalid_argument("--checkpoint-on-signal needs --checkpoint-dir: where would the checkpoint go?");
  }
  learning_rate(o, ctx.size(), 0);  // refuse a bad schedule before any work
  const bool lead = ctx.rank() == 0;
  at::set_num_threads(o.threads);
  auto wall_start = Clock::now();

  // One file system for every loader of the run: remote shards are fetched
  // once (into spools or the cache) and their counts go to the metrics.
  auto shard_fs = data::make_shard_file_system(ctx.config(), log);
  auto sample = probe_sample(o, log, shard_fs, ctx.config());
  torch::manual_seed(o.seed);
  auto model = open_model(o.model, static_cast<int>(sample.size(1)));
  {
    model->eval();
    torch::NoGradGuard no_grad;
    logits(*model, o.model, sample);
    model->train();
  }
  auto optimizer = make_optimizer(o, *model);
  // Dropout and other random layers draw differently on each rank.
  torch::manual_seed(o.seed + 1 + static_cast<std::uint64_t>(ctx.rank()));

  data::LoaderOptions lo;
  lo.shards = o.data;
  lo.rank = ctx.rank();
  lo.size = ctx.size();
  lo.seed = o.seed;
  lo.batch_size = o.batch;
  lo.drop_last = true;  // full batches: the global batch is the same every step
  lo.threads = o.data_threads;
  data::apply_config(ctx.config(), &lo);
  lo.fs = shard_fs;
  lo.normalize = true;
  lo.logger = log;
  data::Loader loader(lo);
  std::unique_ptr<data::Loader> val;
  if (!o.val.empty()) {
    data::LoaderOptions vo = lo;
    vo.shards = o.val;
    vo.shuffle = false;
    vo.drop_last = false;
    val = std::make_unique<data::Loader>(vo);
  }
  const std::int64_t steps_per_epoch = loader.batches_per_epoch();
  if (steps_per_epoch < 1) throw_invalid_argument("the training shards hold less than one batch per rank");

  // Resume: rank 0 chooses the checkpoint, every rank loads it.
  std::int64_t step = 0, first_epoch = 0, resumed_from = -1;
  std::string loader_state, compression_state;
  {
    std::string payload, where;
    double chosen = 0;
    if (o.resume == "auto") {
      if (lead) {
        auto info = find_latest(o.checkpoint_dir, log, &payload);
        chosen = info ? static_cast<double>(info->step) : -1;
        if (info) where = info->payload_path;
        if (!info) log.info("train", "no checkpoint in " + o.checkpoint_dir + "; starting from scratch");
      }
      chosen = allreduce(ctx, "train/resume_step", chosen, false);
      if (chosen >= 0 && !lead) {
        char name[32];
        std::snprintf(name, sizeof name, "/ckpt-%010lld.json", static_cast<long long>(chosen));
        auto info = checkpoint_at(o.checkpoint_dir + name);
        payload = read_checkpoint(info);
        where = info.payload_path;
      }
    } else if (!o.resume.empty()) {
      auto info = checkpoint_at(o.resume);
      payload = read_checkpoint(info);
      where = info.payload_path;
      chosen = 0;
    } else {
      chosen = -1;
    }
    if (chosen >= 0) {
      auto p = restore_payload(ctx, payload, where, *model, *optimizer);
      step = p.step;
      resumed_from = p.step;
      first_epoch = p.epoch_done ? p.epoch + 1 : p.epoch;
      if (!p.epoch_done) loader_state = p.loader;
      compression_state = p.compression;
      set_rng_state(p.rng);
      if (lead) log.info("train", "resumed from " + where + " (step " + std::to_string(p.step) + ")");
    }
  }
  broadcast_parameters(ctx, *model);
  DistributedOptions dopts;
  dopts.compression = o.compression;
  dopts.sync = o.sync;
  dopts.staleness = o.staleness;
  dopts.compression_start_step = o.compression_start_step;
  dopts.allow_lossy = o.allow_lossy ? std::optional<bool>(true) : std::nullopt;
  DistributedOptimizer opt(ctx, *optimizer, model->named_parameters(), dopts);
  if (!compression_state.empty()) {
    opt.restore_compression_state(compression_state);
  } else if (resumed_from >= 0 && !opt.lossy_compression().empty()) {
    throw_invalid_argument("--compression " + opt.lossy_compression() + ": the checkpoint of step " +
                           std::to_string(resumed_from) + " holds no compression state (written without it); " +
                           "resume with the compression it was written with");
  }

  MetricsFile metrics(lead ? o.metrics : "");
  const auto prometheus = metrics::rank_metrics_from_config(
      ctx.config(), discover_world(ProcessEnv()), ProcessEnv(), &ctx.engine(), &ctx.engine().communicator(),
      [fs = shard_fs] {
        // The shard file system's per-source counters ("s3://bucket", "https://host:port"), by kind.
        std::vector<metrics::DataSourceTotals> out;
        const nlohmann::json stats = fs->stats();  // items() must not outlive it
        for (const auto& [source, c] : stats.items()) {
          metrics::DataSourceTotals t;
          t.kind = source.rfind("s3://", 0) == 0 ? "s3" : source.rfind("http", 0) == 0 ? "http" : source;
          t.bytes = c.value("bytes", 0.0);
          t.stalls = c.value("stalls", 0.0);
          t.stall_seconds = c.value("stall_ms", 0.0) / 1e3;
          out.push_back(t);
        }
        return out;
      });
  if (prometheus) {
    prometheus->record_world(0, ctx.size());
    log.info("train", "metrics at " + prometheus->url());
  }
  const std::int64_t global_batch = o.batch * ctx.size();
  {
    // Where this run begins: a restart by the launcher or a resume shows
    // in the report's timeline.
    nlohmann::json j;
    j["type"] = "start";
    j["model"] = o.model;
    j["np"] = ctx.size();
    j["batch_per_rank"] = o.batch;
    j["restart"] = discover_world(ProcessEnv()).restart;
    j["step"] = step;
    j["resumed_from_step"] = resumed_from;
    metrics.write(j);
  }
  double val_loss = NAN, val_acc = NAN, last_loss = NAN;
  std::int64_t trained_samples = 0;
  double train_seconds = 0;

  auto save = [&](std::int64_t epoch, bool epoch_done) {
    if (o.checkpoint_dir.empty()) return;
    average_buffers(ctx, *model);
    auto rngs = gather_bytes(ctx, "train/ckpt_rng", rng_state());
    auto loaders = gather_bytes(ctx, "train/ckpt_loader", loader.save_state());
    // Residuals are every rank's own: all of them go into the checkpoint.
    auto compressions = gather_bytes(ctx, "train/ckpt_compression", opt.compression_state());
    if (lead) {
      auto payload = make_payload(ctx, *model, *optimizer, step, epoch, epoch_done, rngs, loaders, compressions);
      auto info = write_checkpoint(o.checkpoint_dir, step, epoch, payload);
      log.info("train", "checkpoint " + info.payload_path + " (" + std::to_string(payload.size()) + " bytes)");
    }
  };

  auto evaluate = [&]() {
    if (val) validate(ctx, *model, o.model, *val, &val_loss, &val_acc);
  };

  // Resumed at or past --max-steps (a job requeued after its last
  // checkpoint): there is nothing left to train, only to report.
  bool stop = o.max_steps > 0 && step >= o.max_steps;
  const bool finished_before = stop || first_epoch >= o.epochs;
  if (stop && lead) {
    log.info("train", "already at step " + std::to_string(step) + " of --max-steps " + std::to_string(o.max_steps) +
                          "; nothing left to train");
  }
  bool signalled = false;  // every rank agreed to stop on a signal
  for (std::int64_t epoch = first_epoch; epoch < o.epochs && !stop; ++epoch) {
    loader.start_epoch(epoch);
    if (!loader_state.empty()) {
      loader.restore_state(loader_state);
      loader_state.clear();
    }
    model->train();
    Times interval;
    double loss_interval = 0;
    int steps_interval = 0;
    auto interval_start = Clock::now();
    auto epoch_start = Clock::now();
    std::int64_t epoch_samples = 0;
    data::Batch batch;
    while (true) {
      auto t0 = Clock::now();
      if (!loader.next(&batch)) break;
      auto t1 = Clock::now();
      double lr = learning_rate(o, ctx.size(), static_cast<double>(step) / static_cast<double>(steps_per_epoch));
      set_lr(*optimizer, lr);
      opt.zero_grad();
      auto loss = classification_loss(o.model, logits(*model, o.model, batch.images), batch.labels);
      loss.backward();
      auto t2 = Clock::now();
      opt.synchronize();
      auto t3 = Clock::now();
      opt.step();
      auto t4 = Clock::now();
      ++step;
      last_loss = loss.item<double>();
      using D = std::chrono::duration<double>;
      interval.data += D(t1 - t0).count();
      interval.compute += D(t2 - t1).count();
      interval.sync += D(t3 - t2).count();
      interval.optim += D(t4 - t3).count();
      if (prometheus) {
        prometheus->record_step(batch.labels.size(0), D(t1 - t0).count(), D(t2 - t1).count(),
                                D(t3 - t2).count(), D(t4 - t3).count());
      }
      loss_interval += last_loss;
      ++steps_interval;
      epoch_samples += global_batch;
      std::int64_t in_epoch = step - epoch * steps_per_epoch;
      if (o.progress && lead) {
        int width = 30;
        int filled = static_cast<int>(width * in_epoch / steps_per_epoch);
        std::printf("\repoch %lld/%d [%s%s] %lld/%lld loss %.4f lr %.4g %.0f samples/s   ",
                    static_cast<long long>(epoch + 1), o.epochs, std::string(filled, '=').c_str(),
                    std::string(width - filled, ' ').c_str(), static_cast<long long>(in_epoch),
                    static_cast<long long>(steps_per_epoch), last_loss, lr,
                    static_cast<double>(epoch_samples) / seconds_since(epoch_start));
        std::fflush(stdout);
      }
      bool at_end = o.max_steps > 0 && step >= o.max_steps;
      if (step % o.log_every == 0 || at_end) {
        // Every rank's time split, to name the slowest (a collective: every
        // rank reaches it at the same step).
        auto m = torch::zeros({ctx.size(), 5}, torch::kDouble);
        double n = std::max(1, steps_interval);
        m[ctx.rank()] = torch::tensor({interval.data / n, interval.compute / n, interval.sync / n,
                                       interval.optim / n, loss_interval / n},
                                      torch::kDouble);
        m = allreduce(ctx, "train/step_times", m, false);
        if (lead) {
          auto totals = m.narrow(1, 0, 4).sum(1);
          auto slowest = totals.argmax().item<std::int64_t>();
          auto row = m[slowest];
          double elapsed = seconds_since(interval_start);
          nlohmann::json j;
          j["type"] = "step";
          j["step"] = step;
          j["epoch"] = epoch;
          j["loss"] = m.narrow(1, 4, 1).mean().item<double>();
          j["lr"] = lr;
          j["samples_per_s"] = static_cast<double>(steps_interval * global_batch) / elapsed;
          j["data_wait_ms"] = row[0].item<double>() * 1e3;
          j["forward_backward_ms"] = row[1].item<double>() * 1e3;
          j["sync_wait_ms"] = row[2].item<double>() * 1e3;
          j["optimizer_ms"] = row[3].item<double>() * 1e3;
          j["slowest_rank"] = slowest;
          nlohmann::json ranks = nlohmann::json::array();
          for (std::int64_t r = 0; r < ctx.size(); ++r) {
            ranks.push_back({{"data_wait_ms", m[r][0].item<double>() * 1e3},
                             {"forward_backward_ms", m[r][1].item<double>() * 1e3},
                             {"sync_wait_ms", m[r][2].item<double>() * 1e3},
                             {"optimizer_ms", m[r][3].item<double>() * 1e3}});
          }
          j["ranks"] = ranks;
          if (!opt.lossy_compression().empty()) j["compression"] = opt.lossy_compression();
          if (!opt.compression_reason().empty()) j["compression_reason"] = opt.compression_reason();
          auto sources = shard_fs->stats();
          if (!sources.empty()) j["sources"] = sources;  // rank 0's remote reads so far
          metrics.write(j);
          if (!o.progress) {
            std::printf("epoch %lld step %lld loss %.4f lr %.4g %.0f samples/s (slowest rank %lld: data %.1f ms, "
                        "fwd+bwd %.1f ms, sync %.1f ms, opt %.1f ms)\n",
                        static_cast<long long>(epoch + 1), static_cast<long long>(step),
                        j["loss"].get<double>(), lr, j["samples_per_s"].get<double>(),
                        static_cast<long long>(slowest), j["data_wait_ms"].get<double>(),
                        j["forward_backward_ms"].get<double>(), j["sync_wait_ms"].get<double>(),
                        j["optimizer_ms"].get<double>());
            std::fflush(stdout);
          }
        }
        interval = Times{};
        loss_interval = 0;
        steps_interval = 0;
        interval_start = Clock::now();
      }
      if (o.stop_requested != nullptr && !at_end) {
        double asked = o.stop_requested->load() ? 1 : 0;
        if (allreduce(ctx, "train/stop_requested", asked, false) > 0) {
          signalled = true;
          stop = true;
          break;
        }
      }
      if (o.checkpoint_every > 0 && step % o.checkpoint_every == 0 && !at_end) save(epoch, false);
      if (at_end) {
        stop = true;
        break;
      }
    }
    if (signalled) {
      // The scheduler kills us KillWait seconds after its signal: save first, skip validation.
      save(epoch, false);
      if (lead) {
        log.info("train", "stopped on a signal after step " + std::to_string(step) +
                              "; checkpoint saved, resume with --resume auto");
      }
      break;
    }
    // Parameter servers: every worker waits for the others to finish the
    // epoch; ps-async: every worker now holds the servers' parameters.
    opt.end_epoch();
    double epoch_seconds = seconds_since(epoch_start);
    train_seconds += epoch_seconds;
    trained_samples += epoch_samples;
    if (o.progress && lead) std::printf("\n");
    evaluate();
    if (lead) {
      nlohmann::json j;
      j["type"] = "epoch";
      j["epoch"] = epoch;
      j["step"] = step;
      j["train_loss"] = last_loss;
      j["epoch_s"] = epoch_seconds;
      j["samples_per_s"] = static_cast<double>(epoch_samples) / std::max(1e-9, epoch_seconds);
      if (val) {
        j["val_loss"] = val_loss;
        j["val_accuracy"] = val_acc;
      }
      metrics.write(j);
      std::printf("epoch %lld/%d done: %.1f s, %.0f samples/s%s\n", static_cast<long long>(epoch + 1),
                  o.epochs, epoch_seconds, j["samples_per_s"].get<double>(),
                  val ? (", val loss " + std::to_string(val_loss) + ", val accuracy " +
                         std::to_string(val_acc * 100) + "%").c_str()
                      : "");
      std::fflush(stdout);
    }
    save(epoch, !stop);
  }

  if (finished_before) evaluate();  // resumed after the last step: report the model as saved
  average_buffers(ctx, *model);
  auto crcs = torch::zeros({ctx.size()}, torch::kDouble);
  crcs[ctx.rank()] = static_cast<double>(model_checksum(*model));
  crcs = allreduce(ctx, "train/param_crc", crcs, false);
  bool identical = (crcs == crcs[0]).all().item<bool>();
  if (!o.save_model.empty()) save_final_model(ctx, *model, o.save_model, log);

  nlohmann::json s;
  s["type"] = "summary";
  s["model"] = o.model;
  s["parameters"] = parameter_count(*model);
  s["np"] = ctx.size();
  s["epochs"] = o.epochs;
  s["batch_per_rank"] = o.batch;
  s["global_batch"] = global_batch;
  s["steps"] = step;
  s["resumed_from_step"] = resumed_from;
  s["stopped_by_signal"] = signalled;
  s["compression"] = !opt.lossy_compression().empty() ? opt.lossy_compression()
                     : !o.compression.empty()          ? o.compression
                                                       : ctx.config().compression;
  if (!opt.compression_reason().empty()) s["compression_reason"] = opt.compression_reason();
  s["train_loss"] = last_loss;
  if (val) {
    s["val_loss"] = val_loss;
    s["val_accuracy"] = val_acc;
  }
  s["train_samples_per_s"] = static_cast<double>(trained_samples) / std::max(1e-9, train_seconds);
  s["wall_s"] = seconds_since(wall_start);
  char crc_hex[16];
  std::snprintf(crc_hex, sizeof crc_hex, "%08x", static_cast<unsigned>(crcs[0].item<double>()));
  s["params_crc32c"] = crc_hex;
  s["params_identical_across_ranks"] = identical;
  {
    // Remote reads of every rank: bytes, requests, retries, resumes, stalls.
    auto t = shard_fs->totals();
    auto sums = allreduce(ctx, "train/source_totals", torch::tensor(t, torch::kDouble), false);
    if (sums[1].item<double>() > 0 || sums[6].item<double>() > 0) {
      const char* names[] = {"bytes", "requests", "retries", "resumes", "stalls", "stall_ms", "cache_hits"};
      for (size_t i = 0; i < t.size(); ++i) s["remote_reads"][names[i]] = sums[static_cast<std::int64_t>(i)].item<double>();
    }
  }
  metrics.write(s);
  return s;
}

nlohmann::json run_elastic_training(const TrainOptions& o, const Config& config, const Logger& base_log) {
  if (o.data.empty()) throw_invalid_argument("--data: no training shards given");
  if (o.epochs < 1 || o.batch < 1 || o.threads < 1 || o.log_every < 1 || o.elastic_commit_every < 1) {
    throw_invalid_argument("--epochs, --batch, --threads, --log-every and --commit-every must be at least 1");
  }
  if (!o.resume.empty() || o.stop_requested != nullptr || (!o.sync.empty() && o.sync != "allreduce")) {
    throw_invalid_argument("--elastic keeps its state in memory (commits): drop --resume, "
                           "--checkpoint-on-signal and --sync ps/ps-async");
  }
  learning_rate(o, 1, 0);  // refuse a bad schedule before any work
  at::set_num_threads(o.threads);
  const auto wall_start = Clock::now();
  Logger log = base_log;
  auto shard_fs = data::make_shard_file_system(config, log);
  auto sample = probe_sample(o, log, shard_fs, config);
  torch::manual_seed(o.seed);
  auto model = open_model(o.model, static_cast<int>(sample.size(1)));
  {
    model->eval();
    torch::NoGradGuard no_grad;
    logits(*model, o.model, sample);
    model->train();
  }
  auto optimizer = make_optimizer(o, *model);

  data::LoaderOptions lo;
  lo.shards = o.data;
  lo.fs = shard_fs;
  lo.seed = o.seed;
  lo.batch_size = o.batch;
  lo.drop_last = true;
  lo.threads = o.data_threads;
  data::apply_config(config, &lo);
  lo.normalize = true;
  lo.logger = log;
  data::Loader loader(lo);
  loader.start_elastic_epoch(0, 0, 0, 1);
  // The epoch's length in samples, for the schedule (the whole dataset but
  // a last partial batch).
  const double epoch_samples = static_cast<double>(std::max<std::uint64_t>(1, loader.samples_per_epoch()));

  elastic::State state(*model, *optimizer);
  if (!o.checkpoint_dir.empty()) state.write_every(o.checkpoint_dir + "/elastic-state.pt", 10);
  // One endpoint for the process, across its worlds: the engine and the
  // communicator are rebuilt with each world, so their families are left
  // out here; the steps' split and the membership changes are recorded.
  const auto prometheus = metrics::rank_metrics_from_config(config, discover_world(ProcessEnv()), ProcessEnv(),
                                                            nullptr, nullptr);
  if (prometheus) log.info("train", "metrics at " + prometheus->url());
  int worlds = 0;
  nlohmann::json changes = nlohmann::json::array();
  nlohmann::json summary;
  double val_loss = NAN, val_acc = NAN, last_loss = NAN;
  double train_seconds = 0;
  std::int64_t trained_samples = 0;

  const bool stayed = elastic::run(
      state,
      [&](Context& ctx) {
        ++worlds;
        log = base_log.with_rank(ctx.rank());
        const bool lead = ctx.rank() == 0;
        MetricsFile metrics(lead ? o.metrics : "");
        const auto& change = state.last_change();
        nlohmann::json cj;
        cj["type"] = "elastic";
        cj["generation"] = change.generation;
        cj["reason"] = change.reason;
        cj["old_size"] = change.old_size;
        cj["new_size"] = change.new_size;
        cj["rollback_steps"] = change.rollback_steps;
        cj["seconds"] = change.seconds;
        cj["step"] = state.step;
        changes.push_back(cj);
        metrics.write(cj);
        if (prometheus) prometheus->record_world(change.generation, ctx.size());
        // Random layers draw differently on each rank and in each world.
        torch::manual_seed(o.seed + 1 + static_cast<std::uint64_t>(ctx.rank()) +
                           1000003ull * static_cast<std::uint64_t>(change.generation));
        DistributedOptions dopts;
        dopts.compression = o.compression;
        dopts.compression_start_step = o.compression_start_step;
        dopts.allow_lossy = o.allow_lossy ? std::optional<bool>(true) : std::nullopt;
        DistributedOptimizer opt(ctx, *optimizer, model->named_parameters(), dopts);
        std::unique_ptr<data::Loader> val;
        if (!o.val.empty()) {
          data::LoaderOptions vo = lo;
          vo.shards = o.val;
          vo.shuffle = false;
          vo.drop_last = false;
          vo.rank = ctx.rank();
          vo.size = ctx.size();
          val = std::make_unique<data::Loader>(vo);
        }
        auto evaluate = [&]() {
          if (val) validate(ctx, *model, o.model, *val, &val_loss, &val_acc);
        };
        const std::int64_t global_batch = o.batch * ctx.size();
        bool stop = o.max_steps > 0 && state.step >= o.max_steps;
        while (state.epoch < o.epochs && !stop) {
          loader.start_elastic_epoch(state.epoch, static_cast<std::uint64_t>(state.samples), ctx.rank(), ctx.size());
          model->train();
          auto epoch_start = Clock::now();
          auto interval_start = Clock::now();
          std::int64_t epoch_trained = 0;
          data::Batch batch;
          while (true) {
            const auto t0 = Clock::now();
            if (!loader.next(&batch)) break;
            const auto t1 = Clock::now();
            const double progress = static_cast<double>(state.epoch) + static_cast<double>(state.samples) / epoch_samples;
            const double lr = learning_rate(o, ctx.size(), progress);
            set_lr(*optimizer, lr);
            opt.zero_grad();
            auto loss = classification_loss(o.model, logits(*model, o.model, batch.images), batch.labels);
            loss.backward();
            const auto t2 = Clock::now();
            opt.synchronize();
            const auto t3 = Clock::now();
            opt.step();
            if (prometheus) {
              using D = std::chrono::duration<double>;
              prometheus->record_step(batch.labels.size(0), D(t1 - t0).count(), D(t2 - t1).count(),
                                      D(t3 - t2).count(), D(Clock::now() - t3).count());
            }
            ++state.step;
            ++state.batch;
            state.samples += global_batch;
            epoch_trained += global_batch;
            last_loss = loss.item<double>();
            if (state.worker_id() == o.fault_worker && worlds == 1 && state.step == o.fault_step) {
              std::printf("fault: worker %lld ends itself at step %lld (%s)\n", static_cast<long long>(state.worker_id()),
                          static_cast<long long>(state.step), o.fault_kind.c_str());
              std::fflush(stdout);
              if (o.fault_kind == "exit") throw std::runtime_error("injected fault at step " + std::to_string(state.step));
              ::kill(::getpid(), SIGKILL);
            }
            if (lead && state.step % o.log_every == 0) {
              const double secs = seconds_since(interval_start);
              nlohmann::json j;
              j["type"] = "step";
              j["step"] = state.step;
              j["epoch"] = state.epoch;
              j["size"] = ctx.size();
              j["loss"] = last_loss;  // rank 0's last batch (the elastic loop keeps no split)
              j["lr"] = lr;
              j["samples_per_s"] = static_cast<double>(o.log_every * global_batch) / std::max(1e-9, secs);
              metrics.write(j);
              std::printf("epoch %lld step %lld loss %.4f lr %.4g size %d %.0f samples/s\n",
                          static_cast<long long>(state.epoch + 1), static_cast<long long>(state.step), last_loss, lr,
                          ctx.size(), static_cast<double>(o.log_every * global_batch) / std::max(1e-9, secs));
              std::fflush(stdout);
              interval_start = Clock::now();
            }
            if (o.max_steps > 0 && state.step >= o.max_steps) {
              stop = true;
              break;
            }
            if (state.step % o.elastic_commit_every == 0) state.commit();
          }
          const double secs = seconds_since(epoch_start);
          train_seconds += secs;
          trained_samples += epoch_trained;
          evaluate();
          if (lead) {
            nlohmann::json j;
            j["type"] = "epoch";
            j["epoch"] = state.epoch;
            j["step"] = state.step;
            j["size"] = ctx.size();
            j["train_loss"] = last_loss;
            if (val) {
              j["val_loss"] = val_loss;
              j["val_accuracy"] = val_acc;
            }
            metrics.write(j);
            std::printf("epoch %lld/%d done on %d ranks: %.1f s%s\n", static_cast<long long>(state.epoch + 1),
                        o.epochs, ctx.size(), secs,
                        val ? (", val loss " + std::to_string(val_loss) + ", val accuracy " +
                               std::to_string(val_acc * 100) + "%").c_str()
                            : "");
            std::fflush(stdout);
          }
          if (stop) break;
          ++state.epoch;
          state.batch = 0;
          state.samples = 0;
          state.commit();
        }
        average_buffers(ctx, *model);
        auto crcs = torch::zeros({ctx.size()}, torch::kDouble);
        crcs[ctx.rank()] = static_cast<double>(model_checksum(*model));
        crcs = allreduce(ctx, "train/param_crc", crcs, false);
        const bool identical = (crcs == crcs[0]).all().item<bool>();
        if (!o.save_model.empty()) save_final_model(ctx, *model, o.save_model, log);
        summary["type"] = "summary";
        summary["model"] = o.model;
        summary["parameters"] = parameter_count(*model);
        summary["np"] = ctx.size();
        summary["epochs"] = o.epochs;
        summary["batch_per_rank"] = o.batch;
        summary["global_batch"] = global_batch;
        summary["steps"] = state.step;
        summary["resumed_from_step"] = -1;
        summary["stopped_by_signal"] = false;
        summary["train_loss"] = last_loss;
        if (val) {
          summary["val_loss"] = val_loss;
          summary["val_accuracy"] = val_acc;
        }
        summary["train_samples_per_s"] = static_cast<double>(trained_samples) / std::max(1e-9, train_seconds);
        summary["wall_s"] = seconds_since(wall_start);
        char crc_hex[16];
        std::snprintf(crc_hex, sizeof crc_hex, "%08x", static_cast<unsigned>(crcs[0].item<double>()));
        summary["params_crc32c"] = crc_hex;
        summary["params_identical_across_ranks"] = identical;
        summary["elastic_changes"] = changes;
        summary["rank"] = ctx.rank();
        metrics.write(summary);
      },
      config, base_log);
  if (!stayed) {
    summary = nlohmann::json::object();
    summary["type"] = "summary";
    summary["removed"] = true;
  }
  return summary;
}

}  // namespace hpct::train
