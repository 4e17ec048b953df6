#include "train/sharded_checkpoint.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>

#include "core/error.h"
#include "core/fd.h"
#include "data/formats/crc32c.h"

namespace hpct::train {
namespace {

namespace fs = std::filesystem;

constexpr char kMagic[8] = {'H', 'P', 'C', 'T', 'S', 'H', 'D', '1'};
constexpr std::uint64_t kAlign = 64;
constexpr char kFolderPrefix[] = "sharded-";

void fsync_dir(const std::string& dir) {
  UniqueFd fd(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (fd.get() < 0) throw_io("open " + dir, errno);
  if (::fsync(fd.get()) != 0) throw_io("fsync " + dir, errno);
}

class PosixWriter final : public CheckpointFiles::Writer {
 public:
  PosixWriter(const std::string& dir, const std::string& name)
      : dir_(dir), tmp_(dir + "/." + name + ".tmp"), dst_(dir + "/" + name) {
    fd_.reset(::open(tmp_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
    if (fd_.get() < 0) throw_io("open " + tmp_, errno);
  }
  ~PosixWriter() override {
    if (!committed_) ::unlink(tmp_.c_str());
  }
  void append(const void* data, std::size_t n) override {
    const char* p = static_cast<const char*>(data);
    while (n > 0) {
      ssize_t w = ::write(fd_.get(), p, n);
      if (w < 0 && errno == EINTR) continue;
      if (w < 0) throw_io("write " + tmp_ + " at byte offset " + std::to_string(written_), errno);
      p += w;
      n -= static_cast<std::size_t>(w);
      written_ += static_cast<std::uint64_t>(w);
    }
  }
  void commit() override {
    if (::fsync(fd_.get()) != 0) throw_io("fsync " + tmp_, errno);
    fd_.reset();
    if (::rename(tmp_.c_str(), dst_.c_str()) != 0)
      throw_io("rename " + tmp_ + " to " + dst_, errno);
    committed_ = true;
    fsync_dir(dir_);
  }

 private:
  std::string dir_, tmp_, dst_;
  UniqueFd fd_;
  std::uint64_t written_ = 0;
  bool committed_ = false;
};

class PosixCheckpointFiles final : public CheckpointFiles {
 public:
  std::unique_ptr<Writer> create(const std::string& dir, const std::string& name) override {
    return std::make_unique<PosixWriter>(dir, name);
  }
  std::string read_range(const std::string& path, std::uint64_t offset, std::uint64_t n) override {
    UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
    if (fd.get() < 0) throw_io("open " + path, errno);
    std::string out(n, '\0');
    std::uint64_t got = 0;
    while (got < n) {
      ssize_t r = ::pread(fd.get(), out.data() + got, n - got, static_cast<off_t>(offset + got));
      if (r < 0 && errno == EINTR) continue;
      if (r < 0)
        throw_io("read " + path + " at byte offset " + std::to_string(offset + got), errno);
      if (r == 0) break;
      got += static_cast<std::uint64_t>(r);
    }
    out.resize(got);
    return out;
  }
  std::uint64_t size(const std::string& path) override {
    std::error_code ec;
    auto n = fs::file_size(path, ec);
    if (ec) throw_io("stat " + path, ec.value());
    return n;
  }
};

std::string folder_name(std::int64_t step) {
  char buf[40];
  std::snprintf(buf, sizeof buf, "%s%010lld", kFolderPrefix, static_cast<long long>(step));
  return buf;
}

std::string range_text(const std::string& name, std::int64_t offset, std::int64_t numel) {
  return name + " elements [" + std::to_string(offset) + ", " + std::to_string(offset + numel) +
         ")";
}

void write_padding(CheckpointFiles::Writer& w, std::uint64_t* at, std::uint32_t* crc) {
  static const char zeros[kAlign] = {};
  std::uint64_t pad = (kAlign - *at % kAlign) % kAlign;
  if (pad == 0) return;
  w.append(zeros, pad);
  *crc = data::crc32c(zeros, pad, *crc);
  *at += pad;
}

}  // namespace

std::size_t sharded_dtype_size(const std::string& dtype) {
  static const std::map<std::string, std::size_t> sizes = {
      {"float32", 4}, {"float64", 8}, {"float16", 2}, {"bfloat16", 2}, {"int64", 8},
      {"int32", 4},   {"int16", 2},   {"int8", 1},    {"uint8", 1},    {"bool", 1}};
  auto it = sizes.find(dtype);
  if (it == sizes.end()) {
    throw_invalid_argument(
        "sharded checkpoint: dtype '" + dtype +
        "' is not one of float32, float64, float16, bfloat16, int64, int32, int16, int8, "
        "uint8, bool");
  }
  return it->second;
}

std::int64_t sharded_numel(const std::vector<std::int64_t>& shape) {
  std::int64_t n = 1;
  for (auto d : shape) n *= d;
  return n;
}

std::int64_t sharded_folder_step(const std::string& name) {
  const std::size_t n = sizeof kFolderPrefix - 1;
  if (name.compare(0, n, kFolderPrefix) != 0 || name.size() == n) return -1;
  if (!std::all_of(name.begin() + n, name.end(), [](char c) { return c >= '0' && c <= '9'; }))
    return -1;
  return std::strtoll(name.c_str() + n, nullptr, 10);
}

std::shared_ptr<CheckpointFiles> posix_checkpoint_files() {
  return std::make_shared<PosixCheckpointFiles>();
}

std::string sharded_folder(const std::string& dir, std::int64_t step) {
  return dir + "/" + folder_name(step);
}

std::string shard_file_name(int rank, int world_size) {
  char buf[48];
  std::snprintf(buf, sizeof buf, "shard-%05d-of-%05d.bin", rank, world_size);
  return buf;
}

ShardFile write_shard(CheckpointFiles& files, const std::string& dir, std::int64_t step, int rank,
                      int world_size, const std::vector<CheckpointPiece>& pieces) {
  if (rank < 0 || rank >= world_size) {
    throw_invalid_argument("write_shard: rank " + std::to_string(rank) + " outside a world of " +
                           std::to_string(world_size));
  }
  std::string folder = sharded_folder(dir, step);
  std::error_code ec;
  fs::create_directories(folder, ec);
  if (ec) throw_io("mkdir " + folder, ec.value());
  ShardFile out;
  out.rank = rank;
  out.name = shard_file_name(rank, world_size);
  auto w = files.create(folder, out.name);
  w->append(kMagic, sizeof kMagic);
  std::uint64_t at = sizeof kMagic;
  std::uint32_t crc = data::crc32c(kMagic, sizeof kMagic);
  for (const auto& p : pieces) {
    const std::size_t esize = sharded_dtype_size(p.dtype);
    if (p.offset < 0 || p.numel < 0 || p.offset + p.numel > sharded_numel(p.shape) ||
        (p.numel > 0 && !p.data)) {
      throw_invalid_argument("write_shard: rank " + std::to_string(rank) + ": " +
                             range_text(p.name, p.offset, p.numel) + " is not inside a tensor of " +
                             std::to_string(sharded_numel(p.shape)) + " elements");
    }
    write_padding(*w, &at, &crc);
    const std::uint64_t n = static_cast<std::uint64_t>(p.numel) * esize;
    WrittenPiece wp{p.name, p.shape, p.dtype, p.offset, p.numel, at, data::crc32c(p.data, n)};
    w->append(p.data, n);
    crc = data::crc32c(p.data, n, crc);
    at += n;
    out.pieces.push_back(std::move(wp));
  }
  w->commit();
  out.bytes = at;
  out.crc32c = crc;
  return out;
}

std::string shard_file_to_json(const ShardFile& f) {
  nlohmann::json j;
  j["rank"] = f.rank;
  j["name"] = f.name;
  j["bytes"] = f.bytes;
  j["crc32c"] = f.crc32c;
  j["pieces"] = nlohmann::json::array();
  for (const auto& p : f.pieces) {
    j["pieces"].push_back({{"name", p.name},
                           {"shape", p.shape},
                           {"dtype", p.dtype},
                           {"offset", p.offset},
                           {"numel", p.numel},
                           {"at", p.file_offset},
                           {"crc32c", p.crc32c}});
  }
  return j.dump();
}

ShardFile shard_file_from_json(const std::string& text) {
  ShardFile f;
  try {
    auto j = nlohmann::json::parse(text);
    f.rank = j.at("rank").get<int>();
    f.name = j.at("name").get<std::string>();
    f.bytes = j.at("bytes").get<std::uint64_t>();
    f.crc32c = j.at("crc32c").get<std::uint32_t>();
    for (const auto& p : j.at("pieces")) {
      f.pieces.push_back({p.at("name").get<std::string>(),
                          p.at("shape").get<std::vector<std::int64_t>>(),
                          p.at("dtype").get<std::string>(), p.at("offset").get<std::int64_t>(),
                          p.at("numel").get<std::int64_t>(), p.at("at").get<std::uint64_t>(),
                          p.at("crc32c").get<std::uint32_t>()});
    }
  } catch (const nlohmann::json::exception& e) {
    throw_data_corrupt(std::string("a shard file's description is malformed: ") + e.what());
  }
  return f;
}

}  // namespace hpct::train
