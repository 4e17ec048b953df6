#include "train/checkpoint.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/fd.h"
#include "data/formats/crc32c.h"
#include "net/socket.h"

namespace hpct::train {
namespace {

namespace fs = std::filesystem;

std::string stem_for(std::int64_t step) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "ckpt-%010lld", static_cast<long long>(step));
  return buf;
}

void fsync_path(const std::string& path, int flags) {
  UniqueFd fd(::open(path.c_str(), flags | O_CLOEXEC));
  if (fd.get() < 0) throw_io("open " + path, errno);
  if (::fsync(fd.get()) != 0) throw_io("fsync " + path, errno);
}

// Temporary file, fsync, rename, fsync of the directory.
void write_atomically(const std::string& dir, const std::string& name, const std::string& bytes) {
  std::string tmp = dir + "/." + name + ".tmp";
  std::string dst = dir + "/" + name;
  {
    UniqueFd fd(::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
    if (fd.get() < 0) throw_io("open " + tmp, errno);
    net::write_all(fd.get(), bytes.data(), bytes.size(), net::kNoDeadline, -1, tmp);
    if (::fsync(fd.get()) != 0) throw_io("fsync " + tmp, errno);
  }
  if (::rename(tmp.c_str(), dst.c_str()) != 0) throw_io("rename " + tmp + " to " + dst, errno);
  fsync_path(dir, O_RDONLY | O_DIRECTORY);
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw_io("open " + path, errno ? errno : ENOENT);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

CheckpointInfo parse_manifest(const std::string& path) {
  std::string text = read_file(path);
  auto j = nlohmann::json::parse(text, nullptr, false);
  if (j.is_discarded() || !j.is_object() || !j.contains("step") || !j.contains("payload")) {
    throw_data_corrupt(path + ": not a checkpoint manifest (" + std::to_string(text.size()) + " bytes)");
  }
  CheckpointInfo info;
  info.step = j["step"].get<std::int64_t>();
  info.epoch = j.value("epoch", std::int64_t{0});
  info.manifest_path = path;
  info.payload_path = (fs::path(path).parent_path() / j["payload"].get<std::string>()).string();
  return info;
}

}  // namespace

CheckpointInfo write_checkpoint(const std::string& dir, std::int64_t step, std::int64_t epoch,
                                const std::string& payload, int keep) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) throw_io("mkdir " + dir, ec.value());
  std::string stem = stem_for(step);
  write_atomically(dir, stem + ".pt", payload);
  nlohmann::json m;
  m["format"] = "hpctrain-checkpoint-1";
  m["step"] = step;
  m["epoch"] = epoch;
  m["payload"] = stem + ".pt";
  m["bytes"] = payload.size();
  m["crc32c"] = data::crc32c(payload.data(), payload.size());
  write_atomically(dir, stem + ".json", m.dump() + "\n");
  if (keep > 0) {
    auto all = list_checkpoints(dir);
    for (size_t i = static_cast<size_t>(keep); i < all.size(); ++i) {
      // Manifest first: a payload without a manifest is never picked.
      fs::remove(all[i].manifest_path, ec);
      fs::remove(all[i].payload_path, ec);
    }
  }
  return checkpoint_at(dir + "/" + stem + ".json");
}

std::string read_checkpoint(const CheckpointInfo& info) {
  auto j = nlohmann::json::parse(read_file(info.manifest_path), nullptr, false);
  if (j.is_discarded() || !j.contains("bytes") || !j.contains("crc32c")) {
    throw_data_corrupt(info.manifest_path + ": not a checkpoint manifest");
  }
  std::string payload = read_file(info.payload_path);
  auto want_bytes = j["bytes"].get<std::uint64_t>();
  if (payload.size() != want_bytes) {
    throw_data_corrupt(info.payload_path + ": " + std::to_string(payload.size()) +
                       " bytes, manifest says " + std::to_string(want_bytes) +
                       " (truncated or overwritten from byte offset " +
                       std::to_string(std::min<std::uint64_t>(payload.size(), want_bytes)) + ")");
  }
  auto want_crc = j["crc32c"].get<std::uint32_t>();
  auto crc = data::crc32c(payload.data(), payload.size());
  if (crc != want_crc) {
    throw_data_corrupt(info.payload_path + ": CRC-32C " + std::to_string(crc) + " over bytes 0.." +
                       std::to_string(payload.size()) + ", manifest says " + std::to_string(want_crc));
  }
  return payload;
}

std::vector<CheckpointInfo> list_checkpoints(const std::string& dir) {
  std::vector<CheckpointInfo> out;
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return out;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    std::string name = e.path().filename().string();
    if (name.rfind("ckpt-", 0) != 0 || e.path().extension() != ".json") continue;
    try {
      out.push_back(parse_manifest(e.path().string()));
    } catch (const Error&) {
      continue;  // find_latest reports damaged manifests by trying the payloads
    }
  }
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.step > b.step; });
  return out;
}

std::optional<CheckpointInfo> find_latest(const std::string& dir, const Logger& log,
                                          std::string* payload) {
  std::error_code ec;
  if (fs::is_directory(dir, ec)) {
    for (const auto& e : fs::directory_iterator(dir, ec)) {
      std::string name = e.path().filename().string();
      if (name.rfind("ckpt-", 0) != 0 || e.path().extension() != ".json") continue;
      try {
        parse_manifest(e.path().string());
      } catch (const Error& err) {
        log.warn("train", std::string("skipping checkpoint: ") + err.what());
      }
    }
  }
  for (const auto& info : list_checkpoints(dir)) {
    try {
      std::string bytes = read_checkpoint(info);
      if (payload) *payload = std::move(bytes);
      return info;
    } catch (const Error& err) {
      log.warn("train", std::string("skipping damaged checkpoint (falling back to an older one): ") +
                            err.what());
    }
  }
  return std::nullopt;
}

CheckpointInfo checkpoint_at(const std::string& path) {
  fs::path p(path);
  if (p.extension() == ".pt") p.replace_extension(".json");
  return parse_manifest(p.string());
}

}  // namespace hpct::train
