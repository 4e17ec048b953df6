#include "train/sharded_checkpoint_torch.h"

#include <caffe2/serialize/inline_container.h>
#include <torch/csrc/jit/serialization/export.h>
#include <torch/csrc/jit/serialization/pickler.h>

#include <filesystem>

#include "core/error.h"
#include "data/formats/crc32c.h"
#include "train/scripted_model.h"
#include "train/train_setup.h"
#include "train/training_state.h"

namespace hpct::train {
namespace {

namespace fs = std::filesystem;

const std::vector<std::pair<std::string, torch::ScalarType>>& dtype_table() {
  static const std::vector<std::pair<std::string, torch::ScalarType>> table = {
      {"float32", torch::kFloat32},   {"float64", torch::kFloat64}, {"float16", torch::kFloat16},
      {"bfloat16", torch::kBFloat16}, {"int64", torch::kInt64},     {"int32", torch::kInt32},
      {"int16", torch::kInt16},       {"int8", torch::kInt8},       {"uint8", torch::kUInt8},
      {"bool", torch::kBool}};
  return table;
}

torch::Tensor cpu_contiguous(const torch::Tensor& t) {
  return t.detach().to(torch::kCPU).contiguous();
}

void add_optimizer_state(const std::string& name, const torch::optim::OptimizerParamState* st,
                         NamedTensors* out) {
  const std::string prefix = "optim/" + name + "/";
  if (auto* a = dynamic_cast<const torch::optim::AdamParamState*>(st)) {
    out->emplace_back(prefix + "step", torch::tensor(a->step(), torch::kInt64));
    out->emplace_back(prefix + "exp_avg", cpu_contiguous(a->exp_avg()));
    out->emplace_back(prefix + "exp_avg_sq", cpu_contiguous(a->exp_avg_sq()));
    if (a->max_exp_avg_sq().defined() && a->max_exp_avg_sq().numel() > 0) {
      out->emplace_back(prefix + "max_exp_avg_sq", cpu_contiguous(a->max_exp_avg_sq()));
    }
  } else if (auto* s = dynamic_cast<const torch::optim::SGDParamState*>(st)) {
    if (s->momentum_buffer().defined())
      out->emplace_back(prefix + "momentum_buffer", cpu_contiguous(s->momentum_buffer()));
  } else {
    throw_invalid_argument("sharded checkpoint: the optimizer of " + name +
                           " is neither sgd nor adam");
  }
}

bool has_tensor(const ShardedIndex& idx, const std::string& name) {
  return idx.tensors.count(name) != 0;
}

// The bytes of a uint8 tensor rank/<r>/<what>; "" when absent.
std::string rank_bytes(CheckpointFiles& files, const ShardedIndex& idx, int r,
                       const std::string& what) {
  const std::string name = "rank/" + std::to_string(r) + "/" + what;
  if (!has_tensor(idx, name)) return "";
  return tensor_bytes(read_whole_tensor(files, idx, name));
}

void copy_into(CheckpointFiles& files, const ShardedIndex& idx, const std::string& name,
               torch::Tensor& dst) {
  auto t = read_whole_tensor(files, idx, name);
  if (t.sizes() != dst.sizes()) {
    throw_mismatch(idx.index_path + ": " + name + " has shape " + shape_of(t) +
                   ", the model's is " + shape_of(dst));
  }
  torch::NoGradGuard no_grad;
  dst.copy_(t);
}

void restore_optimizer_state(CheckpointFiles& files, const ShardedIndex& idx, Model& model,
                             torch::optim::Optimizer& opt) {
  for (auto& np : model.named_parameters()) {
    const std::string prefix = "optim/" + np.key() + "/";
    void* key = np.value().unsafeGetTensorImpl();
    if (dynamic_cast<torch::optim::Adam*>(&opt) && has_tensor(idx, prefix + "exp_avg")) {
      auto st = std::make_unique<torch::optim::AdamParamState>();
      st->step(read_whole_tensor(files, idx, prefix + "step").item<std::int64_t>());
      st->exp_avg(read_whole_tensor(files, idx, prefix + "exp_avg"));
      st->exp_avg_sq(read_whole_tensor(files, idx, prefix + "exp_avg_sq"));
      if (has_tensor(idx, prefix + "max_exp_avg_sq")) {
        st->max_exp_avg_sq(read_whole_tensor(files, idx, prefix + "max_exp_avg_sq"));
      }
      opt.state()[key] = std::move(st);
    } else if (dynamic_cast<torch::optim::SGD*>(&opt) &&
               has_tensor(idx, prefix + "momentum_buffer")) {
      auto st = std::make_unique<torch::optim::SGDParamState>();
      st->momentum_buffer(read_whole_tensor(files, idx, prefix + "momentum_buffer"));
      opt.state()[key] = std::move(st);
    }
  }
}

void write_file(CheckpointFiles& files, const std::string& path, const void* data, std::size_t n) {
  fs::path p = fs::absolute(path);
  auto w = files.create(p.parent_path().string(), p.filename().string());
  w->append(data, n);
  w->commit();
}

// torch::pickle_save without its TorchScript type tags: torch.load with
// weights_only=True refuses their torch.jit._pickle.restore_type_tag, and a
// plain dict of tensors needs none.
std::vector<char> pickle_for_torch_load(const c10::IValue& value) {
  std::vector<char> pickled;
  torch::jit::Pickler pickler(
      [&](const char* buf, std::size_t n) { pickled.insert(pickled.end(), buf, buf + n); }, nullptr,
      nullptr, nullptr, nullptr, /*tag_aggregates=*/false);
  pickler.protocol();
  pickler.pushIValue(value);
  pickler.stop();
  std::vector<char> out;
  caffe2::serialize::PyTorchStreamWriter writer([&](const void* p, std::size_t n) {
    const char* b = static_cast<const char*>(p);
    out.insert(out.end(), b, b + n);
    return n;
  });
  torch::jit::writeArchiveAndTensors("data", pickled.data(), pickled.size(), pickler.tensorData(),
                                     writer);
  writer.writeEndOfFile();
  return out;
}

}  // namespace

std::string sharded_dtype_of(torch::ScalarType t) {
  for (const auto& [name, type] : dtype_table()) {
    if (type == t) return name;
  }
  throw_invalid_argument(std::string("sharded checkpoint: no dtype for torch's ") +
                         c10::toString(t));
}

torch::ScalarType torch_dtype_of(const std::string& dtype) {
  for (const auto& [name, type] : dtype_table()) {
    if (name == dtype) return type;
  }
  sharded_dtype_size(dtype);  // throws, listing the dtypes
  return torch::kFloat32;
}

NamedTensors training_tensors(Model& model, torch::optim::Optimizer& opt) {
  NamedTensors out;
  for (const auto& np : model.named_parameters())
    out.emplace_back("param/" + np.key(), cpu_contiguous(np.value()));
  for (const auto& nb : model.named_buffers())
    out.emplace_back("buffer/" + nb.key(), cpu_contiguous(nb.value()));
  for (const auto& np : model.named_parameters()) {
    auto it = opt.state().find(np.value().unsafeGetTensorImpl());
    if (it != opt.state().end()) add_optimizer_state(np.key(), it->second.get(), &out);
  }
  return out;
}

std::vector<CheckpointPiece> contiguous_pieces(const NamedTensors& tensors, int rank, int world) {
  std::vector<CheckpointPiece> out;
  for (const auto& [name, t] : tensors) {
    const std::int64_t n = t.numel();
    const std::int64_t base = n / world, extra = n % world;
    const std::int64_t begin = rank * base + std::min<std::int64_t>(rank, extra);
    const std::int64_t count = base + (rank < extra ? 1 : 0);
    if (count == 0) continue;
    const std::string dtype = sharded_dtype_of(t.scalar_type());
    const char* data = static_cast<const char*>(t.data_ptr()) + begin * sharded_dtype_size(dtype);
    out.push_back({name, t.sizes().vec(), dtype, begin, count, data});
  }
  return out;
}

torch::Tensor read_whole_tensor(CheckpointFiles& files, const ShardedIndex& index,
                                const std::string& name) {
  auto it = index.tensors.find(name);
  if (it == index.tensors.end()) {
    throw_invalid_argument(index.index_path + ": no tensor " + name +
                           " in the checkpoint at step " + std::to_string(index.step));
  }
  auto t = torch::empty(it->second.shape,
                        torch::TensorOptions().dtype(torch_dtype_of(it->second.dtype)));
  read_ranges(files, index, {{name, 0, it->second.numel, it->second.dtype, t.data_ptr()}});
  return t;
}

ShardedIndex open_sharded_checkpoint(CheckpointFiles& files, const std::string& path,
                                     const Logger& log) {
  std::error_code ec;
  fs::path p(path);
  if (p.filename() == "index.json" || fs::exists(p / "index.json", ec) ||
      sharded_folder_step(p.filename().string()) >= 0) {
    const std::string index_path =
        p.filename() == "index.json" ? p.string() : (p / "index.json").string();
    if (!fs::exists(index_path, ec)) {
      throw_io(index_path +
                   " is missing: this checkpoint's save did not finish (its index is written "
                   "last), or " +
                   path +
                   " is not a sharded checkpoint; give the checkpoint directory to take the newest "
                   "complete one",
               ENOENT);
    }
    auto idx = read_index(files, index_path);
    verify_shards(files, idx);
    return idx;
  }
  if (!fs::is_directory(p, ec))
    throw_io(path + ": no such checkpoint directory or sharded checkpoint", ENOENT);
  auto candidates = list_sharded_indexes(path);
  if (candidates.empty()) {
    throw_io("no sharded checkpoint in " + path +
                 " (no sharded-<step>/index.json; `hpctrain train --shard N " +
                 "--checkpoint-dir DIR` writes them)",
             ENOENT);
  }
  for (const auto& c : candidates) {
    try {
      auto idx = read_index(files, c);
      verify_shards(files, idx);
      return idx;
    } catch (const Error& e) {
      log.warn("checkpoint", std::string("skipping damaged sharded checkpoint: ") + e.what());
    }
  }
  throw_data_corrupt("every sharded checkpoint in " + path + " is damaged (" +
                     std::to_string(candidates.size()) +
                     " tried; the warnings above name the files)");
}

void consolidate_for_torch(CheckpointFiles& files, const ShardedIndex& index,
                           const std::string& out) {
  using Dict = c10::impl::GenericDict;
  auto dict = [] { return Dict(c10::StringType::get(), c10::AnyType::get()); };
  Dict root = dict(), model = dict(), optim = dict(), other = dict();
  std::map<std::string, Dict> per_param;
  for (const auto& [name, t] : index.tensors) {
    torch::Tensor v = read_whole_tensor(files, index, name);
    if (name.rfind("param/", 0) == 0 || name.rfind("buffer/", 0) == 0) {
      model.insert(name.substr(name.find('/') + 1), v);
    } else if (name.rfind("optim/", 0) == 0 && name.rfind('/') > 6) {
      const auto slash = name.rfind('/');
      auto [it, fresh] = per_param.try_emplace(name.substr(6, slash - 6), dict());
      it->second.insert(name.substr(slash + 1), v);
    } else {
      other.insert(name, v);
    }
  }
  for (auto& [param, d] : per_param) optim.insert(param, d);
  root.insert("format", std::string("hpctrain-consolidated-1"));
  root.insert("step", index.step);
  root.insert("world_size", static_cast<std::int64_t>(index.world_size));
  root.insert("model", model);
  root.insert("optimizer", optim);
  root.insert("other", other);
  std::vector<char> bytes = pickle_for_torch_load(root);
  write_file(files, out, bytes.data(), bytes.size());
}

void consolidate_for_hpctrain(CheckpointFiles& files, const ShardedIndex& index,
                              const std::string& out) {
  if (fs::path(out).extension() == ".json") {
    throw_invalid_argument(
        "-o " + out + ": the manifest goes beside the payload as <name>.json; name the payload " +
        "<name>.pt");
  }
  if (!index.meta.is_object() || !index.meta.contains("train")) {
    throw_invalid_argument(index.index_path +
                           ": no \"train\" in its meta, so it was not written by `hpctrain " +
                           "train`; --format torch consolidates any sharded checkpoint");
  }
  const auto& tr = index.meta["train"];
  TrainOptions o;
  o.model = tr.value("model", "");
  o.optimizer = tr.value("optimizer", "sgd");
  o.lr = tr.value("lr", 0.1);
  o.momentum = tr.value("momentum", 0.9);
  o.weight_decay = tr.value("weight_decay", 0.0);
  auto model = open_model(o.model, tr.value("in_channels", 1));
  auto opt = make_optimizer(o, *model);
  for (auto& np : model->named_parameters())
    copy_into(files, index, "param/" + np.key(), np.value());
  for (auto& nb : model->named_buffers()) copy_into(files, index, "buffer/" + nb.key(), nb.value());
  restore_optimizer_state(files, index, *model, *opt);
  std::vector<std::string> rngs, loaders, compressions;
  for (int r = 0; r < index.world_size; ++r) {
    rngs.push_back(rank_bytes(files, index, r, "rng"));
    loaders.push_back(rank_bytes(files, index, r, "loader"));
    compressions.push_back(rank_bytes(files, index, r, "compression"));
  }
  const std::string payload =
      make_payload(index.world_size, *model, *opt, index.step, tr.value("epoch", 0),
                   tr.value("epoch_done", false), rngs, loaders, compressions);
  write_file(files, out, payload.data(), payload.size());
  // The manifest checkpoint.h reads beside it, written after the payload.
  nlohmann::json m;
  m["format"] = "hpctrain-checkpoint-1";
  m["step"] = index.step;
  m["epoch"] = tr.value("epoch", 0);
  m["payload"] = fs::path(out).filename().string();
  m["bytes"] = payload.size();
  m["crc32c"] = data::crc32c(payload.data(), payload.size());
  const std::string text = m.dump() + "\n";
  write_file(files, fs::path(out).replace_extension(".json").string(), text.data(), text.size());
}

}  // namespace hpct::train
