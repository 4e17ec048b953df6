// Test helpers: a temporary directory removed at the end of the test, and
// small shards of real Fashion-MNIST images. Header-only; tests only.
#pragma once

#include <stdlib.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "data/source/file.h"
#include "data/formats/idx.h"
#include "data/decode/image.h"
#include "data/formats/shard_writer.h"
#include "data/formats/tar.h"

namespace hpct::data::testing {

class TempDir {
 public:
  TempDir() {
    std::string tmpl = (std::filesystem::temp_directory_path() / "hpct-data-XXXXXX").string();
    path_ = ::mkdtemp(tmpl.data()) ? tmpl : std::string();
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }
  std::string operator/(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

inline void write_file(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary).write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

inline std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

// The first n Fashion-MNIST test images (28x28 gray) with their labels.
struct SmallMnist {
  std::vector<Image> images;
  std::vector<int> labels;
};
inline SmallMnist load_mnist(size_t n) {
  auto [ip, lp] = fashion_mnist_files(kFashionMnistDir, "test");
  IdxArray im = read_idx(ip), lb = read_idx(lp);
  SmallMnist out;
  for (size_t i = 0; i < n && i < im.items(); ++i) {
    Image img;
    img.height = 28;
    img.width = 28;
    img.channels = 1;
    img.pixels.assign(im.values.begin() + static_cast<std::ptrdiff_t>(i * 784),
                      im.values.begin() + static_cast<std::ptrdiff_t>((i + 1) * 784));
    out.images.push_back(std::move(img));
    out.labels.push_back(lb.values[i]);
  }
  return out;
}

// Writes n samples ("%06d" keys, png + cls) into shards of per_shard
// samples under dir; returns the shard paths.
inline std::vector<std::string> write_mnist_shards(const std::string& dir, size_t n, size_t per_shard,
                                                   const std::string& image_ext = "png") {
  SmallMnist m = load_mnist(n);
  ShardWriterOptions o;
  o.pattern = dir + "/shard-%04d.tar";
  o.max_count = per_shard;
  ShardWriter w(o);
  for (size_t i = 0; i < m.images.size(); ++i) {
    char key[32];
    std::snprintf(key, sizeof key, "%06zu", i);
    w.write(key, {{image_ext, image_ext == "png" ? encode_png(m.images[i]) : encode_jpeg(m.images[i], 95)},
                  {"cls", std::to_string(m.labels[i])}});
  }
  w.close();
  return w.shards();
}

// Every member of the tar file at path, in order, as TarScanner reads them.
inline std::vector<TarMember> read_tar_members(const std::string& path) {
  PosixFileSystem fs;
  auto f = fs.open_read(path);
  TarScanner s(*f);
  std::vector<TarMember> out;
  while (auto m = s.next()) out.push_back(*m);
  return out;
}

}  // namespace hpct::data::testing
