// The index of a sharded checkpoint (sharded_checkpoint.h): written by rank 0
// over every rank's ShardFile, read and checked by every loader.
#include <algorithm>
#include <filesystem>

#include "core/error.h"
#include "train/sharded_checkpoint.h"

namespace hpct::train {
namespace {

namespace fs = std::filesystem;

constexpr char kIndexFormat[] = "hpctrain-sharded-1";
constexpr char kIndexName[] = "index.json";

// Sorts the pieces and checks they cover [0, numel) once; the problem in
// words ("" when none).
std::string cover_problem(const std::string& name, ShardedTensor* t) {
  auto& ps = t->pieces;
  std::sort(ps.begin(), ps.end(), [](const auto& a, const auto& b) { return a.offset < b.offset; });
  std::int64_t next = 0;
  for (const auto& p : ps) {
    if (p.numel == 0) continue;
    if (p.offset > next) {
      return name + ": no piece holds elements [" + std::to_string(next) + ", " +
             std::to_string(p.offset) + ")";
    }
    if (p.offset < next) {
      return name + ": pieces overlap at elements [" + std::to_string(p.offset) + ", " +
             std::to_string(std::min(next, p.offset + p.numel)) + ")";
    }
    next = p.offset + p.numel;
  }
  if (next != t->numel) {
    return name + ": no piece holds elements [" + std::to_string(next) + ", " +
           std::to_string(t->numel) + ")";
  }
  return "";
}

// Keeps the newest `keep` complete checkpoints; older folders go, index
// first (a folder without its index is never loaded), and so do folders
// older than the oldest kept one that never got an index (a crashed write).
void prune(const std::string& dir, int keep) {
  auto complete = list_sharded_indexes(dir);
  if (keep <= 0 || complete.size() <= static_cast<std::size_t>(keep)) return;
  const std::int64_t oldest_kept =
      sharded_folder_step(fs::path(complete[keep - 1]).parent_path().filename().string());
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const std::int64_t step = sharded_folder_step(e.path().filename().string());
    if (step < 0 || step >= oldest_kept) continue;
    fs::remove(e.path() / kIndexName, ec);
    fs::remove_all(e.path(), ec);
  }
}

nlohmann::json tensors_json(const std::map<std::string, ShardedTensor>& tensors) {
  nlohmann::json out = nlohmann::json::object();
  for (const auto& [name, t] : tensors) {
    nlohmann::json pieces = nlohmann::json::array();
    for (const auto& p : t.pieces) {
      pieces.push_back({{"file", p.file},
                        {"offset", p.offset},
                        {"numel", p.numel},
                        {"at", p.file_offset},
                        {"crc32c", p.crc32c}});
    }
    out[name] = {{"shape", t.shape}, {"dtype", t.dtype}, {"pieces", pieces}};
  }
  return out;
}

// Every rank's pieces as tensors; InvalidArgument on disagreement.
std::map<std::string, ShardedTensor> merge_pieces(const std::vector<ShardFile>& by_rank) {
  std::map<std::string, ShardedTensor> tensors;
  for (std::size_t f = 0; f < by_rank.size(); ++f) {
    for (const auto& p : by_rank[f].pieces) {
      auto [it, fresh] = tensors.try_emplace(p.name);
      ShardedTensor& t = it->second;
      if (fresh) {
        t.shape = p.shape;
        t.dtype = p.dtype;
        t.numel = sharded_numel(p.shape);
      } else if (t.shape != p.shape || t.dtype != p.dtype) {
        throw_invalid_argument(
            "sharded checkpoint: rank " + std::to_string(by_rank[f].rank) + " writes " + p.name +
            " as " + p.dtype + " of " + std::to_string(sharded_numel(p.shape)) +
            " elements, another rank as " + t.dtype + " of " + std::to_string(t.numel));
      }
      t.pieces.push_back({static_cast<int>(f), p.offset, p.numel, p.file_offset, p.crc32c});
    }
  }
  for (auto& [name, t] : tensors) {
    auto problem = cover_problem(name, &t);
    if (!problem.empty()) throw_invalid_argument("sharded checkpoint: " + problem);
  }
  return tensors;
}

}  // namespace

std::string write_index(CheckpointFiles& files, const std::string& dir, std::int64_t step,
                        int world_size, const std::vector<ShardFile>& shards,
                        const nlohmann::json& meta, int keep) {
  std::vector<ShardFile> by_rank(static_cast<std::size_t>(std::max(world_size, 0)));
  std::vector<bool> seen(by_rank.size(), false);
  for (const auto& s : shards) {
    if (s.rank < 0 || s.rank >= world_size || seen[s.rank]) {
      throw_invalid_argument("write_index: rank " + std::to_string(s.rank) +
                             "'s shard is outside a world of " + std::to_string(world_size) +
                             " or given twice");
    }
    seen[s.rank] = true;
    by_rank[s.rank] = s;
  }
  for (int r = 0; r < world_size; ++r) {
    if (!seen[r])
      throw_invalid_argument("write_index: no shard file from rank " + std::to_string(r));
  }
  nlohmann::json j;
  j["format"] = kIndexFormat;
  j["step"] = step;
  j["world_size"] = world_size;
  j["meta"] = meta;
  j["files"] = nlohmann::json::array();
  for (const auto& s : by_rank) {
    j["files"].push_back(
        {{"name", s.name}, {"rank", s.rank}, {"bytes", s.bytes}, {"crc32c", s.crc32c}});
  }
  j["tensors"] = tensors_json(merge_pieces(by_rank));
  const std::string folder = sharded_folder(dir, step);
  const std::string text = j.dump(1) + "\n";
  auto w = files.create(folder, kIndexName);
  w->append(text.data(), text.size());
  w->commit();
  prune(dir, keep);
  return folder + "/" + kIndexName;
}

ShardedIndex read_index(CheckpointFiles& files, const std::string& index_path) {
  const std::uint64_t n = files.size(index_path);
  const std::string text = files.read_range(index_path, 0, n);
  auto j = nlohmann::json::parse(text, nullptr, false);
  if (j.is_discarded() || !j.is_object() || j.value("format", "") != kIndexFormat) {
    throw_data_corrupt(index_path + ": not a sharded checkpoint index (" +
                       std::to_string(text.size()) + " bytes; format " + kIndexFormat +
                       " expected)");
  }
  ShardedIndex idx;
  idx.index_path = index_path;
  idx.folder = fs::path(index_path).parent_path().string();
  try {
    idx.step = j.at("step").get<std::int64_t>();
    idx.world_size = j.at("world_size").get<int>();
    idx.meta = j.value("meta", nlohmann::json::object());
    for (const auto& f : j.at("files")) {
      idx.files.push_back({f.at("name").get<std::string>(), f.at("rank").get<int>(),
                           f.at("bytes").get<std::uint64_t>(),
                           f.at("crc32c").get<std::uint32_t>()});
    }
    for (const auto& [name, t] : j.at("tensors").items()) {
      ShardedTensor st;
      st.shape = t.at("shape").get<std::vector<std::int64_t>>();
      st.dtype = t.at("dtype").get<std::string>();
      st.numel = sharded_numel(st.shape);
      for (const auto& p : t.at("pieces")) {
        st.pieces.push_back({p.at("file").get<int>(), p.at("offset").get<std::int64_t>(),
                             p.at("numel").get<std::int64_t>(), p.at("at").get<std::uint64_t>(),
                             p.at("crc32c").get<std::uint32_t>()});
        if (st.pieces.back().file < 0 ||
            st.pieces.back().file >= static_cast<int>(idx.files.size())) {
          throw_data_corrupt(index_path + ": " + name + " names shard file " +
                             std::to_string(st.pieces.back().file) + " of " +
                             std::to_string(idx.files.size()));
        }
      }
      sharded_dtype_size(st.dtype);
      auto problem = cover_problem(name, &st);
      if (!problem.empty()) throw_data_corrupt(index_path + ": " + problem);
      idx.tensors.emplace(name, std::move(st));
    }
  } catch (const nlohmann::json::exception& e) {
    throw_data_corrupt(index_path + ": malformed sharded checkpoint index: " + e.what());
  }
  return idx;
}

std::vector<std::string> list_sharded_indexes(const std::string& dir) {
  std::vector<std::pair<std::int64_t, std::string>> found;
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return {};
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const std::int64_t step = sharded_folder_step(e.path().filename().string());
    if (step < 0 || !fs::exists(e.path() / kIndexName, ec)) continue;
    found.emplace_back(step, (e.path() / kIndexName).string());
  }
  std::sort(found.begin(), found.end(),
            [](const auto& a, const auto& b) { return a.first > b.first; });
  std::vector<std::string> out;
  for (auto& f : found) out.push_back(std::move(f.second));
  return out;
}

}  // namespace hpct::train
