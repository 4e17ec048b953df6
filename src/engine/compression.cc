#include "engine/compression.h"

#include <immintrin.h>

#include <cstdint>
#include <cstring>

namespace hpct::engine {
namespace {

#if defined(__x86_64__)
__attribute__((target("avx,f16c"))) void to_half_f16c(const float* src, std::uint16_t* dst,
                                                       std::size_t n) {
  std::size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m256 v = _mm256_loadu_ps(src + i);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + i),
                     _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT));
  }
  for (; i < n; ++i) dst[i] = comm::float_to_half(src[i]);
}

__attribute__((target("avx,f16c"))) void from_half_f16c(const std::uint16_t* src, float* dst,
                                                         std::size_t n, float scale) {
  std::size_t i = 0;
  __m256 s = _mm256_set1_ps(scale);
  for (; i + 8 <= n; i += 8) {
    __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i));
    _mm256_storeu_ps(dst + i, _mm256_mul_ps(_mm256_cvtph_ps(h), s));
  }
  for (; i < n; ++i) dst[i] = comm::half_to_float(src[i]) * scale;
}

bool has_f16c() {
  static const bool yes = __builtin_cpu_supports("f16c") && __builtin_cpu_supports("avx");
  return yes;
}
#else
bool has_f16c() { return false; }
#endif

// Round to nearest even; NaN kept quiet. Branch-free so the loop vectorizes.
inline std::uint16_t to_bf16(float f) {
  std::uint32_t u;
  std::memcpy(&u, &f, 4);
  std::uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
  std::uint32_t is_nan = (u & 0x7fffffffu) > 0x7f800000u;
  return static_cast<std::uint16_t>(is_nan ? ((u >> 16) | 0x40u) : rounded);
}

inline float from_bf16(std::uint16_t b) {
  std::uint32_t u = static_cast<std::uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

}  // namespace

comm::DataType wire_dtype(Compression c) {
  return c == Compression::kBf16 ? comm::DataType::kBFloat16 : comm::DataType::kFloat16;
}

void compress(const float* src, void* dst, std::size_t n, Compression c) {
  auto* out = static_cast<std::uint16_t*>(dst);
  if (c == Compression::kFp16) {
#if defined(__x86_64__)
    if (has_f16c()) return to_half_f16c(src, out, n);
#endif
    for (std::size_t i = 0; i < n; ++i) out[i] = comm::float_to_half(src[i]);
    return;
  }
  for (std::size_t i = 0; i < n; ++i) out[i] = to_bf16(src[i]);
}

void decompress(const void* src, float* dst, std::size_t n, Compression c, float scale) {
  const auto* in = static_cast<const std::uint16_t*>(src);
  if (c == Compression::kFp16) {
#if defined(__x86_64__)
    if (has_f16c()) return from_half_f16c(in, dst, n, scale);
#endif
    for (std::size_t i = 0; i < n; ++i) dst[i] = comm::half_to_float(in[i]) * scale;
    return;
  }
  for (std::size_t i = 0; i < n; ++i) dst[i] = from_bf16(in[i]) * scale;
}

}  // namespace hpct::engine
