#include "data/formats/idx.h"

#include <zlib.h>

#include <cerrno>

#include "core/error.h"

namespace hpct::data {

std::uint64_t IdxArray::item_size() const {
  std::uint64_t n = 1;
  for (size_t i = 1; i < dims.size(); ++i) n *= dims[i];
  return n;
}

IdxArray read_idx(const std::string& path) {
  gzFile f = gzopen(path.c_str(), "rb");
  if (f == nullptr) throw_io("open " + path, errno ? errno : ENOMEM);
  std::string bytes;
  char buf[1 << 16];
  while (true) {
    int n = gzread(f, buf, sizeof buf);
    if (n < 0) {
      int zerr = 0;
      std::string msg = gzerror(f, &zerr);
      gzclose(f);
      throw_data_corrupt("idx file " + path + ": " + msg + " after " + std::to_string(bytes.size()) +
                         " uncompressed bytes");
    }
    if (n == 0) break;
    bytes.append(buf, static_cast<size_t>(n));
  }
  gzclose(f);
  auto u = [&](size_t at) {
    return static_cast<std::uint32_t>(static_cast<unsigned char>(bytes[at])) << 24 |
           static_cast<std::uint32_t>(static_cast<unsigned char>(bytes[at + 1])) << 16 |
           static_cast<std::uint32_t>(static_cast<unsigned char>(bytes[at + 2])) << 8 |
           static_cast<std::uint32_t>(static_cast<unsigned char>(bytes[at + 3]));
  };
  if (bytes.size() < 4 || bytes[0] != 0 || bytes[1] != 0) {
    throw_data_corrupt("idx file " + path + ": not an IDX file (bad magic)");
  }
  if (static_cast<unsigned char>(bytes[2]) != 0x08) {
    throw_data_corrupt("idx file " + path + ": only uint8 (type 0x08) arrays are supported");
  }
  const int ndims = static_cast<unsigned char>(bytes[3]);
  if (ndims < 1 || bytes.size() < 4 + 4 * static_cast<size_t>(ndims)) {
    throw_data_corrupt("idx file " + path + ": header cut short");
  }
  IdxArray a;
  std::uint64_t total = 1;
  for (int i = 0; i < ndims; ++i) {
    a.dims.push_back(u(4 + 4 * i));
    total *= a.dims.back();
  }
  const size_t head = 4 + 4 * static_cast<size_t>(ndims);
  if (bytes.size() - head != total) {
    throw_data_corrupt("idx file " + path + ": header promises " + std::to_string(total) +
                       " values, file holds " + std::to_string(bytes.size() - head));
  }
  a.values.assign(bytes.begin() + static_cast<std::ptrdiff_t>(head), bytes.end());
  return a;
}

std::pair<std::string, std::string> fashion_mnist_files(const std::string& dir,
                                                        const std::string& split) {
  if (split == "train") {
    return {dir + "/train-images-idx3-ubyte.gz", dir + "/train-labels-idx1-ubyte.gz"};
  }
  if (split == "test") return {dir + "/t10k-images-idx3-ubyte.gz", dir + "/t10k-labels-idx1-ubyte.gz"};
  throw_invalid_argument("--split " + split + ": expected train or test");
}

}  // namespace hpct::data
