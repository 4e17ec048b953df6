#include "train/sharded_checkpoint_train.h"

#include <unordered_map>

#include "core/error.h"
#include "train/sharded_checkpoint_torch.h"
#include "train/validation.h"

namespace hpct::train {
namespace {

CheckpointPiece piece_of(const std::string& name, const OwnedPiece& op, const torch::Tensor& flat) {
  return {name,           op.shape,       sharded_dtype_of(flat.scalar_type()), op.piece.offset,
          op.piece.numel, flat.data_ptr()};
}

// The optimizer state of one piece as (key, flat tensor).
std::vector<std::pair<std::string, torch::Tensor>> piece_state(
    const torch::optim::OptimizerParamState* st) {
  std::vector<std::pair<std::string, torch::Tensor>> out;
  if (auto* a = dynamic_cast<const torch::optim::AdamParamState*>(st)) {
    out.emplace_back("exp_avg", a->exp_avg().contiguous());
    out.emplace_back("exp_avg_sq", a->exp_avg_sq().contiguous());
    if (a->max_exp_avg_sq().defined() && a->max_exp_avg_sq().numel() > 0) {
      out.emplace_back("max_exp_avg_sq", a->max_exp_avg_sq().contiguous());
    }
  } else if (auto* s = dynamic_cast<const torch::optim::SGDParamState*>(st)) {
    if (s->momentum_buffer().defined())
      out.emplace_back("momentum_buffer", s->momentum_buffer().contiguous());
  }
  return out;
}

nlohmann::json train_meta(const TrainOptions& o, const ShardedSavePoint& at) {
  return {{"model", o.model},
          {"optimizer", o.optimizer},
          {"lr", o.lr},
          {"momentum", o.momentum},
          {"weight_decay", o.weight_decay},
          {"epoch", at.epoch},
          {"epoch_done", at.epoch_done},
          {"consumed", at.consumed},
          {"data_split", o.data_split},
          {"shard", o.shard},
          {"seed", o.seed}};
}

// What one rank read of a checkpoint, applied once every rank could read its part.
struct Loaded {
  std::vector<std::pair<torch::Tensor, torch::Tensor>> copies;  // (destination, as read)
  std::vector<std::map<std::string, torch::Tensor>> states;     // per owned piece: key -> state
  torch::Tensor rng_t, loader_t;  // this rank's bytes as read (same world size only)
  std::string rng, loader;
};

constexpr const char* kStateKeys[] = {"exp_avg", "exp_avg_sq", "max_exp_avg_sq", "momentum_buffer",
                                      "step"};

torch::Tensor want(const ShardedIndex& idx, const std::string& name, std::int64_t offset,
                   std::int64_t numel, std::vector<RangeRequest>* wants) {
  const auto& t = idx.tensors.at(name);
  auto buf = torch::empty({numel}, torch::TensorOptions().dtype(torch_dtype_of(t.dtype)));
  wants->push_back({name, offset, numel, t.dtype, buf.data_ptr()});
  return buf;
}

// This rank's requests: whole parameters (stages 1 and 2, where every rank
// holds them) or its pieces (stage 3), the buffers, its pieces' optimizer
// state, and its own bytes when the world size is the checkpoint's.
std::vector<RangeRequest> requests(Model& model, DistributedOptimizer& opt,
                                   const std::vector<OwnedPiece>& owned, const ShardedIndex& idx,
                                   Loaded* l) {
  *l = Loaded{};
  std::vector<RangeRequest> wants;
  auto has = [&](const std::string& n) { return idx.tensors.count(n) != 0; };
  if (opt.shard_stage() < 3) {
    for (auto& np : model.named_parameters()) {
      if (!np.value().requires_grad()) continue;
      l->copies.emplace_back(np.value(),
                             want(idx, "param/" + np.key(), 0, np.value().numel(), &wants));
    }
  } else {
    for (const auto& op : owned) {
      l->copies.emplace_back(
          op.param, want(idx, "param/" + op.piece.name, op.piece.offset, op.piece.numel, &wants));
    }
  }
  for (auto& nb : model.named_buffers()) {
    if (has("buffer/" + nb.key()))
      l->copies.emplace_back(nb.value(),
                             want(idx, "buffer/" + nb.key(), 0, nb.value().numel(), &wants));
  }
  for (const auto& op : owned) {
    auto& st = l->states.emplace_back();
    for (const char* key : kStateKeys) {
      const std::string name = "optim/" + op.piece.name + "/" + key;
      if (!has(name)) continue;
      const bool scalar = std::string(key) == "step";
      st[key] = want(idx, name, scalar ? 0 : op.piece.offset, scalar ? 1 : op.piece.numel, &wants);
    }
  }
  return wants;
}

void install(Loaded& l, const std::vector<OwnedPiece>& owned, DistributedOptimizer& opt) {
  torch::NoGradGuard no_grad;
  for (auto& [dst, src] : l.copies) dst.copy_(src.view(dst.sizes()));
  auto& upd = opt.updating_optimizer();
  for (std::size_t i = 0; i < owned.size(); ++i) {
    auto& st = l.states[i];
    void* key = owned[i].param.unsafeGetTensorImpl();
    if (dynamic_cast<torch::optim::Adam*>(&upd) && st.count("exp_avg")) {
      auto s = std::make_unique<torch::optim::AdamParamState>();
      if (st.count("step")) s->step(st["step"].item<std::int64_t>());
      s->exp_avg(st["exp_avg"]);
      s->exp_avg_sq(st.at("exp_avg_sq"));
      if (st.count("max_exp_avg_sq")) s->max_exp_avg_sq(st["max_exp_avg_sq"]);
      upd.state()[key] = std::move(s);
    } else if (dynamic_cast<torch::optim::SGD*>(&upd) && st.count("momentum_buffer")) {
      auto s = std::make_unique<torch::optim::SGDParamState>();
      s->momentum_buffer(st["momentum_buffer"]);
      upd.state()[key] = std::move(s);
    }
  }
}

// Rank 0's list of checkpoints to try, newest first, on every rank.
std::vector<std::string> candidates(Context& ctx, const TrainOptions& o) {
  std::string mine;
  if (ctx.rank() == 0) {
    std::vector<std::string> list;
    if (o.resume == "auto") {
      list = list_sharded_indexes(o.checkpoint_dir);
    } else {
      const bool is_index =
          o.resume.size() >= 10 && o.resume.compare(o.resume.size() - 10, 10, "index.json") == 0;
      list.push_back(is_index ? o.resume : o.resume + "/index.json");
    }
    for (const auto& c : list) mine += c + "\n";
  }
  std::string all = gather_bytes(ctx, "train/sharded_candidates", mine).at(0);
  std::vector<std::string> out;
  for (std::size_t at = 0, nl; (nl = all.find('\n', at)) != std::string::npos; at = nl + 1) {
    out.push_back(all.substr(at, nl - at));
  }
  return out;
}

// Where the resumed run starts in the data, or InvalidArgument when the
// position cannot carry over to this world size.
ResumePoint position(Context& ctx, const TrainOptions& o, const ShardedIndex& idx,
                     const Loaded& l) {
  const auto tr = idx.meta.value("train", nlohmann::json::object());
  ResumePoint r;
  r.step = idx.step;
  r.resumed_from = idx.step;
  const std::int64_t epoch = tr.value("epoch", std::int64_t{0});
  const bool done = tr.value("epoch_done", false);
  r.first_epoch = done ? epoch + 1 : epoch;
  const std::string split = tr.value("data_split", std::string("rank"));
  if (!done && split != o.data_split) {
    throw_invalid_argument(idx.index_path + ": written with --data-split " + split +
                           " within epoch " + std::to_string(epoch) +
                           "; resume with --data-split " + split);
  }
  if (!done && o.data_split == "global") {
    r.consumed = tr.value("consumed", std::uint64_t{0});
  } else if (!done && idx.world_size != ctx.size()) {
    throw_invalid_argument(
        idx.index_path + ": written by " + std::to_string(idx.world_size) + " ranks within epoch " +
        std::to_string(epoch) + ", and each rank's data slice depends on the world size: resume " +
        "at " + std::to_string(idx.world_size) + " ranks, or train with --data-split global " +
        "(the same samples per step at any world size)");
  } else if (!done) {
    r.loader_state = l.loader;
  }
  return r;
}

}  // namespace

// In the order DistributedOptimizer builds its optimizer: by the user's
// param group, then in layout order.
std::vector<OwnedPiece> owned_pieces(Context& ctx, Model& model, torch::optim::Optimizer& user_opt,
                                     DistributedOptimizer& opt) {
  auto pieces = opt.shard_layout().owned_pieces(ctx.rank());
  if (pieces.empty()) return {};
  std::unordered_map<const void*, std::size_t> group_of;
  for (std::size_t g = 0; g < user_opt.param_groups().size(); ++g) {
    for (const auto& t : user_opt.param_groups()[g].params()) group_of[t.unsafeGetTensorImpl()] = g;
  }
  std::map<std::string, std::pair<std::size_t, std::vector<std::int64_t>>> of_name;
  for (const auto& np : model.named_parameters()) {
    auto it = group_of.find(np.value().unsafeGetTensorImpl());
    if (it != group_of.end()) of_name[np.key()] = {it->second, np.value().sizes().vec()};
  }
  std::vector<std::vector<OwnedPiece>> per_group(user_opt.param_groups().size());
  for (const auto& p : pieces) {
    const auto& [group, shape] = of_name.at(p.name);
    per_group[group].push_back({p, shape, {}});
  }
  std::vector<OwnedPiece> out;
  for (auto& g : per_group) out.insert(out.end(), g.begin(), g.end());
  std::size_t i = 0;
  for (const auto& group : opt.updating_optimizer().param_groups()) {
    for (const auto& t : group.params()) {
      if (i >= out.size() || t.numel() != out[i].piece.numel) {
        throw_mismatch("sharded checkpoint: the shard optimizer's tensor " + std::to_string(i) +
                       " does not match this rank's layout piece");
      }
      out[i++].param = t;
    }
  }
  if (i != out.size())
    throw_mismatch("sharded checkpoint: the shard optimizer holds fewer tensors than pieces");
  return out;
}

ResumePoint resume_sharded_checkpoint(Context& ctx, const TrainOptions& o, const Logger& log,
                                      Model& model, torch::optim::Optimizer& user_opt,
                                      DistributedOptimizer& opt) {
  if (o.resume.empty()) return ResumePoint{};
  const auto owned = owned_pieces(ctx, model, user_opt, opt);
  const auto list = candidates(ctx, o);
  if (list.empty()) {
    if (ctx.rank() == 0)
      log.info("train", "no sharded checkpoint in " + o.checkpoint_dir + "; starting from scratch");
    return ResumePoint{};
  }
  Loaded loaded;
  auto files = posix_checkpoint_files();
  auto idx = load_newest(
      *files, list, log,
      [&](const ShardedIndex& i) {
        auto wants = requests(model, opt, owned, i, &loaded);
        const std::string me = "rank/" + std::to_string(ctx.rank()) + "/";
        if (i.world_size == ctx.size() && i.tensors.count(me + "rng")) {
          loaded.rng_t = want(i, me + "rng", 0, i.tensors.at(me + "rng").numel, &wants);
        }
        if (i.world_size == ctx.size() && i.tensors.count(me + "loader")) {
          loaded.loader_t = want(i, me + "loader", 0, i.tensors.at(me + "loader").numel, &wants);
        }
        return wants;
      },
      [&](std::int64_t, bool ok) {
        return allreduce(ctx, "train/sharded_resume_bad", ok ? 0.0 : 1.0, false) == 0;
      });
  if (!idx) {
    throw_data_corrupt(
        "no sharded checkpoint of " + std::to_string(list.size()) + " (" + list.front() +
        " the newest) could be read by every rank; the warnings above name the damaged files");
  }
  if (loaded.rng_t.defined()) loaded.rng = tensor_bytes(loaded.rng_t);
  if (loaded.loader_t.defined()) loaded.loader = tensor_bytes(loaded.loader_t);
  ResumePoint r = position(ctx, o, *idx, loaded);
  install(loaded, owned, opt);
  if (!loaded.rng.empty()) set_rng_state(loaded.rng);
  if (ctx.rank() == 0) {
    log.info("train", "resumed from " + idx->index_path + " (step " + std::to_string(idx->step) +
                          ", written by " + std::to_string(idx->world_size) + " ranks, loaded by " +
                          std::to_string(ctx.size()) + ")");
  }
  return r;
}

void save_sharded_checkpoint(Context& ctx, const TrainOptions& o, const Logger& log, Model& model,
                             torch::optim::Optimizer& user_opt, DistributedOptimizer& opt,
                             data::Loader& loader, const ShardedSavePoint& at) {
  average_buffers(ctx, model);
  const auto owned = owned_pieces(ctx, model, user_opt, opt);
  std::vector<CheckpointPiece> pieces;
  std::vector<torch::Tensor> keep;  // what the pieces point into
  auto& state = opt.updating_optimizer().state();
  for (const auto& op : owned) {
    keep.push_back(op.param.detach().contiguous());
    pieces.push_back(piece_of("param/" + op.piece.name, op, keep.back()));
    auto it = state.find(op.param.unsafeGetTensorImpl());
    if (it == state.end()) continue;
    for (auto& [key, t] : piece_state(it->second.get())) {
      keep.push_back(t);
      pieces.push_back(piece_of("optim/" + op.piece.name + "/" + key, op, t));
    }
    auto* adam = dynamic_cast<const torch::optim::AdamParamState*>(it->second.get());
    if (adam && op.piece.offset == 0) {  // the step count once, by the owner of element 0
      keep.push_back(torch::tensor(adam->step(), torch::kInt64));
      pieces.push_back(
          {"optim/" + op.piece.name + "/step", {}, "int64", 0, 1, keep.back().data_ptr()});
    }
  }
  NamedTensors own = {
      {"rank/" + std::to_string(ctx.rank()) + "/rng", bytes_tensor(rng_state())},
      {"rank/" + std::to_string(ctx.rank()) + "/loader", bytes_tensor(loader.save_state())}};
  if (ctx.rank() == 0) {
    for (const auto& nb : model.named_buffers())
      own.emplace_back("buffer/" + nb.key(), nb.value().detach().cpu().contiguous());
  }
  for (auto& p : contiguous_pieces(own, 0, 1)) pieces.push_back(p);
  auto files = posix_checkpoint_files();
  ShardFile mine = write_shard(*files, o.checkpoint_dir, at.step, ctx.rank(), ctx.size(), pieces);
  // Every rank's file is in place once the gather returns: the index goes last.
  auto all = gather_bytes(ctx, "train/sharded_ckpt_files", shard_file_to_json(mine));
  if (ctx.rank() != 0) return;
  std::vector<ShardFile> shards;
  for (const auto& s : all) shards.push_back(shard_file_from_json(s));
  auto index = write_index(*files, o.checkpoint_dir, at.step, ctx.size(), shards,
                           {{"train", train_meta(o, at)}});
  log.info("train",
           "sharded checkpoint " + index + " (" + std::to_string(ctx.size()) + " shard files)");
}

}  // namespace hpct::train
