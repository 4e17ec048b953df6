#include "train/training_state.h"

#include <ATen/CPUGeneratorImpl.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <sstream>

#include "core/error.h"
#include "engine/engine.h"
#include "train/checkpoint.h"
#include "train/sharded_checkpoint.h"
#include "train/sharded_checkpoint_train.h"
#include "train/scripted_model.h"
#include "train/train_setup.h"
#include "train/validation.h"

namespace hpct::train {

torch::Tensor bytes_tensor(const std::string& s) {
  return torch::from_blob(const_cast<char*>(s.data()), {static_cast<std::int64_t>(s.size())},
                          torch::kUInt8)
      .clone();
}

std::string tensor_bytes(const torch::Tensor& t) {
  auto c = t.to(torch::kCPU, torch::kUInt8).contiguous();
  return std::string(reinterpret_cast<const char*>(c.data_ptr()), static_cast<size_t>(c.numel()));
}

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

std::string make_payload(int world_size, Model& model, torch::optim::Optimizer& opt, std::int64_t step,
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
  ar.write("world_size", torch::tensor({static_cast<std::int64_t>(world_size)}, torch::kLong));
  for (int r = 0; r < world_size; ++r) {
    ar.write("rng/" + std::to_string(r), bytes_tensor(rngs[r]));
    ar.write("loader/" + std::to_string(r), bytes_tensor(loaders[r]));
    if (!compressions[r].empty()) ar.write("compression/" + std::to_string(r), bytes_tensor(compressions[r]));
  }
  std::ostringstream ss;
  ar.save_to(ss);
  return ss.str();
}

namespace {

std::int64_t read_int(torch::serialize::InputArchive& ar, const std::string& key) {
  torch::Tensor t;
  ar.read(key, t);
  return t.item<std::int64_t>();
}

}  // namespace

Payload restore_payload(Context& ctx, const std::string& bytes, const std::string& where, Model& model,
                        torch::optim::Optimizer& opt) {
  Payload p;
  try {
    torch::serialize::InputArchive ar;
    std::istringstream ss(bytes);
    // Onto the CPU, wherever it was written: a checkpoint of a GPU run
    // loads on a host without one, and run_training moves the model and
    // the optimizer's state to its device afterwards.
    ar.load_from(ss, torch::Device(torch::kCPU));
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

ResumePoint resume_point(Context& ctx, const TrainOptions& o, const Logger& log, Model& model,
                         torch::optim::Optimizer& optimizer) {
  const bool lead = ctx.rank() == 0;
  ResumePoint r;
  std::string payload, where;
  double chosen = 0;
  if (o.resume == "auto") {
    if (lead) {
      auto info = find_latest(o.checkpoint_dir, log, &payload);
      chosen = info ? static_cast<double>(info->step) : -1;
      if (info) where = info->payload_path;
      // -2: only sharded checkpoints there (every rank refuses below).
      if (!info && !list_sharded_indexes(o.checkpoint_dir).empty()) chosen = -2;
      if (!info && chosen != -2) log.info("train", "no checkpoint in " + o.checkpoint_dir + "; starting from scratch");
    }
    chosen = allreduce(ctx, "train/resume_step", chosen, false);
    if (chosen == -2) {
      throw_invalid_argument(o.checkpoint_dir + " holds sharded checkpoints (written with --shard): resume with "
                             "--shard N, or make a whole one with `hpctrain checkpoint consolidate " +
                             o.checkpoint_dir + " -o FILE --format hpctrain` and --resume FILE");
    }
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
    auto p = restore_payload(ctx, payload, where, model, optimizer);
    r.step = p.step;
    r.resumed_from = p.step;
    r.first_epoch = p.epoch_done ? p.epoch + 1 : p.epoch;
    if (!p.epoch_done) r.loader_state = p.loader;
    r.compression_state = p.compression;
    set_rng_state(p.rng);
    if (lead) log.info("train", "resumed from " + where + " (step " + std::to_string(p.step) + ")");
  }
  return r;
}

void save_checkpoint(Context& ctx, const TrainOptions& o, const Logger& log, Model& model,
                     torch::optim::Optimizer& optimizer, data::Loader& loader, DistributedOptimizer& opt,
                     std::int64_t step, std::int64_t epoch, bool epoch_done, std::uint64_t consumed) {
  if (o.checkpoint_dir.empty()) return;
  if (opt.shard_stage() > 0) {
    save_sharded_checkpoint(ctx, o, log, model, optimizer, opt, loader, {step, epoch, epoch_done, consumed});
    return;
  }
  average_buffers(ctx, model);
  auto rngs = gather_bytes(ctx, "train/ckpt_rng", rng_state());
  auto loaders = gather_bytes(ctx, "train/ckpt_loader", loader.save_state());
  // Residuals are every rank's own: all of them go into the checkpoint.
  auto compressions = gather_bytes(ctx, "train/ckpt_compression", opt.compression_state());
  if (ctx.rank() == 0) {
    auto payload = make_payload(ctx.size(), model, optimizer, step, epoch, epoch_done, rngs, loaders, compressions);
    auto info = write_checkpoint(o.checkpoint_dir, step, epoch, payload);
    log.info("train", "checkpoint " + info.payload_path + " (" + std::to_string(payload.size()) + " bytes)");
  }
}

}  // namespace hpct::train
