// IDX files (the MNIST / Fashion-MNIST format), plain or gzip-compressed:
// a magic (0, 0, type 0x08 = uint8, number of dims), big-endian u32 dims,
// then the values.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace hpct::data {

struct IdxArray {
  std::vector<std::uint32_t> dims;  // e.g. {60000, 28, 28} or {60000}
  std::vector<std::uint8_t> values;
  std::uint64_t items() const { return dims.empty() ? 0 : dims[0]; }
  std::uint64_t item_size() const;  // product of dims after the first
};

// Reads path (gzip when it starts with the gzip magic, else plain, through
// zlib either way). Only uint8 arrays. Io when unreadable, DataCorrupt
// naming the file when the header or length is wrong. Blocks on disk.
IdxArray read_idx(const std::string& path);

// The Fashion-MNIST files of Debian's dataset-fashion-mnist package.
constexpr const char* kFashionMnistDir = "/usr/share/datasets/fashion-mnist";
// "train" -> {images path, labels path}; "test" -> the t10k files.
std::pair<std::string, std::string> fashion_mnist_files(const std::string& dir, const std::string& split);

}  // namespace hpct::data
