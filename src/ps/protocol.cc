#include "ps/protocol.h"

#include <algorithm>
#include <cstring>

#include "core/error.h"

namespace hpct::ps {

bool is_summable(DataType d) {
  return d == DataType::kFloat32 || d == DataType::kFloat64 || d == DataType::kInt32 ||
         d == DataType::kInt64;
}

const char* mode_name(Mode m) { return m == Mode::kSync ? "sync" : "async"; }

FrameHeader make_header(Kind kind, std::uint32_t piece, std::uint64_t bytes) {
  FrameHeader h;
  h.kind = static_cast<std::uint8_t>(kind);
  h.piece = piece;
  h.bytes = bytes;
  return h;
}

void check_dtype(const FrameHeader& h, const std::string& peer) {
  if (h.dtype > static_cast<std::uint8_t>(DataType::kInt16) ||
      !is_summable(static_cast<DataType>(h.dtype))) {
    throw_data_corrupt(peer + " sent a frame with unknown dtype " + std::to_string(h.dtype));
  }
}

namespace {

template <typename T>
void sum_typed(T* dst, const std::vector<const void*>& srcs, size_t n) {
  // Blocks of 4096 elements keep the partial sums in cache while every
  // source is added in its fixed place in the order.
  constexpr size_t kBlock = 4096;
  const T* first = static_cast<const T*>(srcs[0]);
  for (size_t b = 0; b < n; b += kBlock) {
    const size_t e = std::min(n, b + kBlock);
    if (dst != first) std::memcpy(dst + b, first + b, (e - b) * sizeof(T));
    for (size_t s = 1; s < srcs.size(); ++s) {
      const T* src = static_cast<const T*>(srcs[s]);
      for (size_t i = b; i < e; ++i) dst[i] += src[i];
    }
  }
}

template <typename T>
void add_scaled_typed(T* dst, const T* src, T scale, size_t n) {
  for (size_t i = 0; i < n; ++i) dst[i] += src[i] * scale;
}

}  // namespace

void sum_in_order(DataType dtype, void* dst, const std::vector<const void*>& srcs, size_t n) {
  if (srcs.empty()) {
    std::memset(dst, 0, n * dtype_size(dtype));
    return;
  }
  switch (dtype) {
    case DataType::kFloat32:
      return sum_typed(static_cast<float*>(dst), srcs, n);
    case DataType::kFloat64:
      return sum_typed(static_cast<double*>(dst), srcs, n);
    case DataType::kInt32:
      return sum_typed(static_cast<std::int32_t*>(dst), srcs, n);
    case DataType::kInt64:
      return sum_typed(static_cast<std::int64_t*>(dst), srcs, n);
    default:
      throw_invalid_argument(std::string("the parameter servers do not sum ") +
                             dtype_name(dtype));
  }
}

void add_scaled(DataType dtype, void* dst, const void* src, double scale, size_t n) {
  switch (dtype) {
    case DataType::kFloat32:
      return add_scaled_typed(static_cast<float*>(dst), static_cast<const float*>(src),
                              static_cast<float>(scale), n);
    case DataType::kFloat64:
      return add_scaled_typed(static_cast<double*>(dst), static_cast<const double*>(src), scale,
                              n);
    case DataType::kInt32:
      return add_scaled_typed(static_cast<std::int32_t*>(dst),
                              static_cast<const std::int32_t*>(src), std::int32_t{1}, n);
    case DataType::kInt64:
      return add_scaled_typed(static_cast<std::int64_t*>(dst),
                              static_cast<const std::int64_t*>(src), std::int64_t{1}, n);
    default:
      throw_invalid_argument(std::string("the parameter servers do not sum ") +
                             dtype_name(dtype));
  }
}

}  // namespace hpct::ps
