#include "engine/compression.h"

#include <cstdint>

#include "comm/reduce.h"

namespace hpct::engine {

// The casts are comm's vectorized ones (F16C / AVX2 when the CPU has them,
// comm/reduce_simd.h), so the engine and the backends round alike.

comm::DataType wire_dtype(Compression c) {
  return c == Compression::kBf16 ? comm::DataType::kBFloat16 : comm::DataType::kFloat16;
}

void compress(const float* src, void* dst, std::size_t n, Compression c) {
  comm::floats_to_16(src, static_cast<std::uint16_t*>(dst), n, wire_dtype(c));
}

void decompress(const void* src, float* dst, std::size_t n, Compression c, float scale) {
  comm::floats_from_16(static_cast<const std::uint16_t*>(src), dst, n, wire_dtype(c), scale);
}

}  // namespace hpct::engine
