#include "train/elastic_shards.h"

#include <algorithm>
#include <sstream>

#include "core/error.h"
#include "engine/engine.h"
#include "torch/context.h"
#include "train/sharded_checkpoint_train.h"
#include "train/training_state.h"

namespace hpct::train {
namespace {

namespace O = torch::optim;
using Range = ElasticShards::Range;

// The state tensors of each piece, the same on every rank (from the
// optimizer's type and options, so known before the first step).
std::vector<std::string> state_keys(const O::Optimizer& opt) {
  if (auto* a = dynamic_cast<const O::Adam*>(&opt)) {
    std::vector<std::string> keys = {"exp_avg", "exp_avg_sq"};
    if (static_cast<const O::AdamOptions&>(a->defaults()).amsgrad()) keys.emplace_back("max_exp_avg_sq");
    return keys;
  }
  if (auto* s = dynamic_cast<const O::SGD*>(&opt)) {
    if (static_cast<const O::SGDOptions&>(s->defaults()).momentum() != 0) return {"momentum_buffer"};
    return {};
  }
  throw_invalid_argument("--elastic --shard: the optimizer must be sgd or adam (--optimizer)");
}

torch::Tensor state_tensor(const O::OptimizerParamState& st, const std::string& key) {
  if (auto* a = dynamic_cast<const O::AdamParamState*>(&st)) {
    return key == "exp_avg" ? a->exp_avg() : key == "exp_avg_sq" ? a->exp_avg_sq() : a->max_exp_avg_sq();
  }
  if (auto* s = dynamic_cast<const O::SGDParamState*>(&st)) return s->momentum_buffer();
  return {};
}

// The row of the piece starting at flat_offset in a rank's pieces (layout order).
std::size_t row_of(const std::vector<ShardPiece>& rows, std::int64_t flat_offset) {
  for (std::size_t i = 0; i < rows.size(); ++i) {
    if (rows[i].flat_offset == flat_offset) return i;
  }
  throw_mismatch("elastic shards: no layout piece at element " + std::to_string(flat_offset));
}

// Rank k's range of `layout` from `root` to every rank (root passes its copy).
Range broadcast_range(Context& ctx, int root, const ShardLayout& layout, int k, std::size_t keys,
                      const Range* mine) {
  Range r;
  if (ctx.rank() == root) {
    r = *mine;
  } else {
    r.values = torch::empty({static_cast<std::int64_t>(keys), layout.count(k)}, torch::kFloat);
    r.meta = torch::empty({static_cast<std::int64_t>(layout.owned_pieces(k).size()), 2}, torch::kLong);
  }
  if (ctx.size() == 1) return r;
  if (r.values.numel() > 0) {
    ctx.engine().broadcast_async("elastic/shard/values", tensor_ref(r.values, "a range of optimizer state"), root)
        .wait();
  }
  if (r.meta.numel() > 0) {
    ctx.engine().broadcast_async("elastic/shard/meta", tensor_ref(r.meta, "a range's piece steps"), root).wait();
  }
  return r;
}

// The part of old rank k's range r that falls in rank `me`'s range of `now`.
void merge(const ShardLayout& old, int k, const Range& r, const ShardLayout& now, int me, Range* out) {
  const std::int64_t ob = old.begin(k), nb = now.begin(me);
  const std::int64_t s = std::max(ob, nb), e = std::min(old.end(k), now.end(me));
  if (s < e && out->values.size(0) > 0) {
    out->values.narrow(1, s - nb, e - s).copy_(r.values.narrow(1, s - ob, e - s));
  }
  // Whether a parameter has state, and Adam's step, hold for all its pieces.
  const auto old_rows = old.owned_pieces(k);
  const auto new_rows = now.owned_pieces(me);
  if (old_rows.empty() || new_rows.empty()) return;
  auto om = r.meta.accessor<std::int64_t, 2>();
  auto nm = out->meta.accessor<std::int64_t, 2>();
  for (std::size_t i = 0; i < old_rows.size(); ++i) {
    if (om[static_cast<std::int64_t>(i)][0] == 0) continue;
    for (std::size_t j = 0; j < new_rows.size(); ++j) {
      if (new_rows[j].param_index != old_rows[i].param_index) continue;
      nm[static_cast<std::int64_t>(j)][0] = 1;
      nm[static_cast<std::int64_t>(j)][1] = om[static_cast<std::int64_t>(i)][1];
    }
  }
}

std::string rank_list(const std::vector<int>& ranks) {
  std::string s;
  for (int r : ranks) s += (s.empty() ? "" : ", ") + std::to_string(r);
  return "[" + s + "]";
}

}  // namespace

int replica_holder(int k, const std::vector<int>& first) {
  const int n = static_cast<int>(first.size());
  if (n <= 1) return k;
  auto ranks_on = [&](int r) { return static_cast<int>(std::count(first.begin(), first.end(), first[r])); };
  const int next = (first[k] + ranks_on(k)) % n;  // the first rank of the next host
  if (first[next] != first[k] && ranks_on(next) == ranks_on(k)) return next + (k - first[k]);
  for (int i = 1; i < n; ++i) {
    if (first[(k + i) % n] != first[k]) return (k + i) % n;
  }
  return (k + 1) % n;  // one host: the next rank
}

Range ElasticShards::snapshot(Context& ctx, Model& model, torch::optim::Optimizer& user,
                              DistributedOptimizer& opt) const {
  torch::NoGradGuard no_grad;
  const auto& layout = opt.shard_layout();
  const int me = ctx.rank();
  const std::int64_t begin = layout.begin(me);
  const auto rows = layout.owned_pieces(me);
  Range r;
  r.values = torch::zeros({static_cast<std::int64_t>(keys_.size()), layout.count(me)}, torch::kFloat);
  r.meta = torch::zeros({static_cast<std::int64_t>(rows.size()), 2}, torch::kLong);
  if (rows.empty()) return r;
  auto meta = r.meta.accessor<std::int64_t, 2>();
  auto& state = opt.updating_optimizer().state();
  for (const auto& op : owned_pieces(ctx, model, user, opt)) {
    auto it = state.find(op.param.unsafeGetTensorImpl());
    if (it == state.end()) continue;
    const auto row = static_cast<std::int64_t>(row_of(rows, op.piece.flat_offset));
    meta[row][0] = 1;
    if (auto* a = dynamic_cast<const O::AdamParamState*>(it->second.get())) meta[row][1] = a->step();
    for (std::size_t k = 0; k < keys_.size(); ++k) {
      torch::Tensor t = state_tensor(*it->second, keys_[k]);
      if (!t.defined() || t.numel() != op.piece.numel) continue;
      r.values[static_cast<std::int64_t>(k)].narrow(0, op.piece.flat_offset - begin, op.piece.numel).copy_(
          t.reshape({-1}));
    }
  }
  return r;
}

void ElasticShards::install(Context& ctx, const Range& mine, Model& model, torch::optim::Optimizer& user,
                            DistributedOptimizer& opt) const {
  const auto& layout = opt.shard_layout();
  const std::int64_t begin = layout.begin(ctx.rank());
  const auto rows = layout.owned_pieces(ctx.rank());
  auto& upd = opt.updating_optimizer();
  upd.state().clear();
  if (rows.empty()) return;
  auto meta = mine.meta.accessor<std::int64_t, 2>();
  const bool adam = dynamic_cast<O::Adam*>(&upd) != nullptr;
  for (const auto& op : owned_pieces(ctx, model, user, opt)) {
    const auto row = static_cast<std::int64_t>(row_of(rows, op.piece.flat_offset));
    if (meta[row][0] == 0) continue;
    auto slice = [&](std::size_t k) {
      return mine.values[static_cast<std::int64_t>(k)].narrow(0, op.piece.flat_offset - begin, op.piece.numel).clone();
    };
    void* key = op.param.unsafeGetTensorImpl();
    if (adam) {
      auto s = std::make_unique<O::AdamParamState>();
      s->step(meta[row][1]);
      s->exp_avg(slice(0));
      s->exp_avg_sq(slice(1));
      if (keys_.size() > 2) s->max_exp_avg_sq(slice(2));
      upd.state()[key] = std::move(s);
    } else if (!keys_.empty()) {
      auto s = std::make_unique<O::SGDParamState>();
      s->momentum_buffer(slice(0));
      upd.state()[key] = std::move(s);
    }
  }
}

Range ElasticShards::gather_committed(Context& ctx, const elastic::State& state, DistributedOptimizer& opt) {
  const auto gen = static_cast<std::int64_t>(state.extras.at("shard/gen"));
  const auto step = static_cast<std::int64_t>(state.extras.at("shard/step"));
  const int world = static_cast<int>(state.extras.at("shard/world"));
  const Version* held = nullptr;
  for (const auto& v : versions_) {
    if (v.gen == gen && v.step == step) held = &v;
  }
  // The ranks of that world whose ranges this rank holds, a line each.
  std::string mine;
  if (held != nullptr) {
    for (const auto& kr : held->ranges) mine += std::to_string(kr.first) + "\n";
  }
  const auto all = gather_bytes(ctx, "elastic/shard/holds", mine);
  std::vector<int> sender(static_cast<std::size_t>(world), -1);
  for (int r = 0; r < ctx.size(); ++r) {
    std::istringstream in(all[static_cast<std::size_t>(r)]);
    for (int k; in >> k;) {
      if (k >= 0 && k < world && sender[static_cast<std::size_t>(k)] < 0) sender[static_cast<std::size_t>(k)] = r;
    }
  }
  std::vector<int> lost;
  for (int k = 0; k < world; ++k) {
    if (sender[static_cast<std::size_t>(k)] < 0) lost.push_back(k);
  }
  if (!lost.empty()) {
    const std::string flag = "--shard " + std::to_string(o_.shard);
    throw_data_corrupt(
        "elastic " + flag + ": the optimizer state of step " + std::to_string(step) + " (" + std::to_string(world) +
        "-rank layout) lost the ranges of ranks " + rank_list(lost) +
        ": each range is kept by its rank and by one replica on another host, and both are gone (hosts lost "
        "together); the job cannot go on from memory: " +
        (o_.checkpoint_dir.empty()
             ? std::string("no --checkpoint-dir was given, so no sharded checkpoint was written; give "
                           "--checkpoint-dir DIR to keep one every 10 commits")
             : "resume from the newest sharded checkpoint in " + o_.checkpoint_dir + " (hpctrain train " + flag +
                   " --data-split global --resume auto --checkpoint-dir " + o_.checkpoint_dir + ")"));
  }
  const ShardLayout old(opt.shard_layout().params(), world);
  const auto& now = opt.shard_layout();
  const int me = ctx.rank();
  Range out;
  out.values = torch::zeros({static_cast<std::int64_t>(keys_.size()), now.count(me)}, torch::kFloat);
  out.meta = torch::zeros({static_cast<std::int64_t>(now.owned_pieces(me).size()), 2}, torch::kLong);
  for (int k = 0; k < world; ++k) {
    const int root = sender[static_cast<std::size_t>(k)];
    const Range r = broadcast_range(ctx, root, old, k, keys_.size(), root == me ? &held->ranges.at(k) : nullptr);
    merge(old, k, r, now, me, &out);
  }
  if (me == 0) {
    log_.info("elastic", "sharded optimizer state of step " + std::to_string(step) + " re-split from " +
                             std::to_string(world) + " ranks' ranges to " + std::to_string(ctx.size()) + " ranks");
  }
  return out;
}

void ElasticShards::keep(Context& ctx, elastic::State& state, Model& model, torch::optim::Optimizer& user,
                         DistributedOptimizer& opt) {
  const int n = ctx.size(), me = ctx.rank();
  Version v;
  v.gen = state.last_change().generation;
  v.step = state.step;
  v.world = n;
  Range own = snapshot(ctx, model, user, opt);
  for (int k = 0; k < n && n > 1; ++k) {
    Range r = broadcast_range(ctx, k, opt.shard_layout(), k, keys_.size(), k == me ? &own : nullptr);
    if (k != me && replica_holder(k, first_) == me) v.ranges[k] = std::move(r);
  }
  v.ranges[me] = std::move(own);
  // Returned on one rank: every rank holds its ranges of v (so a State
  // saved at v never names a commit whose ranges are not all kept).
  hpct::allreduce(ctx, "elastic/shard/kept", 1.0, false);
  state.extras["shard/gen"] = static_cast<double>(v.gen);
  state.extras["shard/step"] = static_cast<double>(v.step);
  state.extras["shard/world"] = n;
  versions_.push_back(std::move(v));
  if (versions_.size() > 2) versions_.erase(versions_.begin());
  state.save();
}

void ElasticShards::drop_older(std::int64_t gen, std::int64_t step) {
  versions_.erase(std::remove_if(versions_.begin(), versions_.end(),
                                 [&](const Version& v) { return v.gen != gen || v.step != step; }),
                  versions_.end());
}

void ElasticShards::commit(Context& ctx, elastic::State& state, Model& model, torch::optim::Optimizer& user,
                           DistributedOptimizer& opt, data::Loader& loader) {
  keep(ctx, state, model, user, opt);
  const std::int64_t gen = versions_.back().gen, step = versions_.back().step;
  if (!o_.checkpoint_dir.empty() && ++commits_ % 10 == 0) {
    ShardedSavePoint at;
    at.step = state.step;
    at.epoch = state.epoch;
    at.consumed = static_cast<std::uint64_t>(state.samples);
    // The elastic loop splits each epoch by global batch: the checkpoint
    // says so, and a job of any world size resumes it with --data-split
    // global (this loader's own bytes fit no other loop).
    TrainOptions global = o_;
    global.data_split = "global";
    save_sharded_checkpoint(ctx, global, log_.with_rank(ctx.rank()), model, user, opt, loader, at);
  }
  // Once the check returned, every rank has saved this commit: no rank can
  // be restored to an older one.
  try {
    state.check_host_updates();
  } catch (const elastic::MembershipChanged&) {
    drop_older(gen, step);
    throw;
  }
  drop_older(gen, step);
}

void ElasticShards::rebuild(Context& ctx, elastic::State& state, Model& model, torch::optim::Optimizer& user,
                            DistributedOptimizer& opt, data::Loader& loader) {
  keys_ = state_keys(user);
  first_.clear();
  for (const auto& s : gather_bytes(ctx, "elastic/shard/hosts", std::to_string(ctx.rank() - ctx.local_rank()))) {
    first_.push_back(std::stoi(s));
  }
  if (state.extras.count("shard/gen") != 0) {
    const Range mine = gather_committed(ctx, state, opt);
    install(ctx, mine, model, user, opt);
  } else {
    opt.updating_optimizer().state().clear();  // the job's start: no step taken yet
  }
  commit(ctx, state, model, user, opt, loader);
}

}  // namespace hpct::train
