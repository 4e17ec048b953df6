#include "comm/reduce_simd.h"

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstring>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace hpct::comm::simd {

#if defined(__x86_64__)
namespace {

#define HPCT_SIMD __attribute__((target("avx2,f16c"))) inline

// Eight 16-bit values <-> eight floats.
struct Half {
  HPCT_SIMD static __m256 load(const std::uint16_t* p) {
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  }
  HPCT_SIMD static void store(std::uint16_t* p, __m256 v) {
    __m128i h = _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    // F16C keeps a NaN's payload; float_to_half() makes every NaN sign|0x7e00.
    const __m128i abs = _mm_and_si128(h, _mm_set1_epi16(0x7fff));
    const __m128i nan = _mm_cmpgt_epi16(abs, _mm_set1_epi16(0x7c00));
    const __m128i quiet = _mm_or_si128(_mm_and_si128(h, _mm_set1_epi16(static_cast<short>(0x8000))),
                                       _mm_set1_epi16(0x7e00));
    h = _mm_blendv_epi8(h, quiet, nan);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(p), h);
  }
  static float scalar_load(std::uint16_t h) { return half_to_float(h); }
  static std::uint16_t scalar_store(float f) { return float_to_half(f); }
};

struct BFloat16 {
  HPCT_SIMD static __m256 load(const std::uint16_t* p) {
    const __m256i w = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
    return _mm256_castsi256_ps(_mm256_slli_epi32(w, 16));
  }
  HPCT_SIMD static void store(std::uint16_t* p, __m256 v) {
    // float_to_bfloat16(): u + 0x7fff + lsb, then the top half; NaN -> (u >> 16) | 0x40.
    const __m256i u = _mm256_castps_si256(v);
    const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
    const __m256i rounded =
        _mm256_srli_epi32(_mm256_add_epi32(_mm256_add_epi32(u, _mm256_set1_epi32(0x7fff)), lsb), 16);
    const __m256i abs = _mm256_and_si256(u, _mm256_set1_epi32(0x7fffffff));
    const __m256i nan = _mm256_cmpgt_epi32(abs, _mm256_set1_epi32(0x7f800000));
    const __m256i quiet = _mm256_or_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(0x40));
    const __m256i r = _mm256_blendv_epi8(rounded, quiet, nan);
    // 32 -> 16 bits per lane (no value exceeds 0xffff), then lanes back in order.
    const __m256i packed = _mm256_permute4x64_epi64(_mm256_packus_epi32(r, r), 0x08);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(p), _mm256_castsi256_si128(packed));
  }
  static float scalar_load(std::uint16_t h) { return bfloat16_to_float(h); }
  static std::uint16_t scalar_store(float f) { return float_to_bfloat16(f); }
};

// The portable reduction's operations: std::min(x, y) is (y < x ? y : x),
// which is MINPS(y, x); std::max(x, y) is (x < y ? y : x), MAXPS(y, x).
// The one freedom left: when both operands of a sum or product are NaN, x86
// returns the first one, and the compiler may order the operands of x + y
// either way, in the portable code as here; the result is a NaN either way,
// its sign and payload unspecified (IEEE 754 leaves them so too).
template <ReduceOp Op>
HPCT_SIMD __m256 apply8(__m256 x, __m256 y) {
  if constexpr (Op == ReduceOp::kProduct) return _mm256_mul_ps(x, y);
  if constexpr (Op == ReduceOp::kMin) return _mm256_min_ps(y, x);
  if constexpr (Op == ReduceOp::kMax) return _mm256_max_ps(y, x);
  return _mm256_add_ps(x, y);
}

template <ReduceOp Op>
inline float apply1(float x, float y) {
  if constexpr (Op == ReduceOp::kProduct) return x * y;
  if constexpr (Op == ReduceOp::kMin) return std::min(x, y);
  if constexpr (Op == ReduceOp::kMax) return std::max(x, y);
  return x + y;
}

template <typename F, ReduceOp Op>
__attribute__((target("avx2,f16c"))) void reduce_loop(std::uint16_t* out, const std::uint16_t* a,
                                                      const std::uint16_t* b, size_t n) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) F::store(out + i, apply8<Op>(F::load(a + i), F::load(b + i)));
  for (; i < n; ++i) out[i] = F::scalar_store(apply1<Op>(F::scalar_load(a[i]), F::scalar_load(b[i])));
}

template <typename F>
void reduce_any(std::uint16_t* out, const std::uint16_t* a, const std::uint16_t* b, size_t n,
                ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kAvg: return reduce_loop<F, ReduceOp::kSum>(out, a, b, n);
    case ReduceOp::kProduct: return reduce_loop<F, ReduceOp::kProduct>(out, a, b, n);
    case ReduceOp::kMin: return reduce_loop<F, ReduceOp::kMin>(out, a, b, n);
    case ReduceOp::kMax: return reduce_loop<F, ReduceOp::kMax>(out, a, b, n);
  }
}

template <typename F>
__attribute__((target("avx2,f16c"))) void divide_loop(std::uint16_t* p, size_t n, float divisor) {
  const __m256 d = _mm256_set1_ps(divisor);
  size_t i = 0;
  for (; i + 8 <= n; i += 8) F::store(p + i, _mm256_div_ps(F::load(p + i), d));
  for (; i < n; ++i) p[i] = F::scalar_store(F::scalar_load(p[i]) / divisor);
}

template <typename F>
__attribute__((target("avx2,f16c"))) void to_16_loop(const float* src, std::uint16_t* dst, size_t n) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) F::store(dst + i, _mm256_loadu_ps(src + i));
  for (; i < n; ++i) dst[i] = F::scalar_store(src[i]);
}

template <typename F>
__attribute__((target("avx2,f16c"))) void from_16_loop(const std::uint16_t* src, float* dst,
                                                       size_t n, float scale) {
  const __m256 s = _mm256_set1_ps(scale);
  size_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(dst + i, _mm256_mul_ps(F::load(src + i), s));
  for (; i < n; ++i) dst[i] = F::scalar_load(src[i]) * scale;
}

#undef HPCT_SIMD

// 128 bytes a turn through four 32-byte registers, the rest by memcpy.
// kStream: dst gets the bytes with non-temporal stores from its first
// 32-byte boundary on, the head and the tail with plain ones, and no fence
// (copy_to_shared: the caller fences once).
template <bool kStream>
__attribute__((target("avx2"))) void copy_loop(std::uint8_t* dst, const std::uint8_t* src,
                                               size_t n) {
  size_t i = 0;
  if constexpr (kStream) {
    i = std::min(n, (32 - reinterpret_cast<std::uintptr_t>(dst) % 32) % 32);
    if (i > 0) std::memcpy(dst, src, i);
  }
  for (; i + 128 <= n; i += 128) {
    const auto* s = reinterpret_cast<const __m256i*>(src + i);
    auto* d = reinterpret_cast<__m256i*>(dst + i);
    const __m256i v[4] = {_mm256_loadu_si256(s), _mm256_loadu_si256(s + 1),
                          _mm256_loadu_si256(s + 2), _mm256_loadu_si256(s + 3)};
    for (int k = 0; k < 4; ++k) {
      if constexpr (kStream) {
        _mm256_stream_si256(d + k, v[k]);
      } else {
        _mm256_storeu_si256(d + k, v[k]);
      }
    }
  }
  if (i < n) std::memcpy(dst + i, src + i, n - i);
}

// a[i] = b[i] = (x[i] + y[i]) * scale, 16 a turn (kScale false: the sum,
// no multiply). kStream: a gets non-temporal stores from its first 32-byte
// boundary on, and no fence (sum_floats_to_shared_and); b plain stores.
template <bool kStream, bool kScale>
__attribute__((target("avx2"))) void sum_to_both_loop(float* a, float* b, const float* x,
                                                      const float* y, size_t n, float scale) {
  auto one = [&](size_t k) {
    float v = x[k] + y[k];
    if constexpr (kScale) v *= scale;
    a[k] = b[k] = v;
  };
  const __m256 s = _mm256_set1_ps(scale);
  size_t i = 0;
  if constexpr (kStream) {
    for (; i < n && reinterpret_cast<std::uintptr_t>(a + i) % 32 != 0; ++i) one(i);
  }
  for (; i + 16 <= n; i += 16) {
    __m256 v0 = _mm256_add_ps(_mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i));
    __m256 v1 = _mm256_add_ps(_mm256_loadu_ps(x + i + 8), _mm256_loadu_ps(y + i + 8));
    if constexpr (kScale) {
      v0 = _mm256_mul_ps(v0, s);
      v1 = _mm256_mul_ps(v1, s);
    }
    if constexpr (kStream) {
      _mm256_stream_ps(a + i, v0);
      _mm256_stream_ps(a + i + 8, v1);
    } else {
      _mm256_storeu_ps(a + i, v0);
      _mm256_storeu_ps(a + i + 8, v1);
    }
    _mm256_storeu_ps(b + i, v0);
    _mm256_storeu_ps(b + i + 8, v1);
  }
  for (; i < n; ++i) one(i);
}

template <bool kStream>
void sum_to_both(float* a, float* b, const float* x, const float* y, size_t n, float scale) {
  static const bool avx2 = __builtin_cpu_supports("avx2");
  if (!avx2) {
    for (size_t i = 0; i < n; ++i) a[i] = b[i] = (x[i] + y[i]) * scale;  // * 1: the sum's bits
  } else if (scale == 1) {
    sum_to_both_loop<kStream, false>(a, b, x, y, n, scale);
  } else {
    sum_to_both_loop<kStream, true>(a, b, x, y, n, scale);
  }
}

}  // namespace

void copy_to_shared(void* dst, const void* src, size_t bytes) {
  static const bool avx2 = __builtin_cpu_supports("avx2");
  if (!avx2) {
    std::memcpy(dst, src, bytes);
    return;
  }
  copy_loop<true>(static_cast<std::uint8_t*>(dst), static_cast<const std::uint8_t*>(src), bytes);
}

void sum_floats_to_shared_and(float* a, float* b, const float* x, const float* y, size_t n,
                              float scale) {
  sum_to_both<true>(a, b, x, y, n, scale);
}

void store_fence() { _mm_sfence(); }

void sum_floats_to_both(float* a, float* b, const float* x, const float* y, size_t n,
                        float scale) {
  sum_to_both<false>(a, b, x, y, n, scale);
}

void copy(void* dst, const void* src, size_t bytes) {
  static const bool avx2 = __builtin_cpu_supports("avx2");
  if (!avx2) {
    std::memcpy(dst, src, bytes);
    return;
  }
  copy_loop<false>(static_cast<std::uint8_t*>(dst), static_cast<const std::uint8_t*>(src), bytes);
}

bool available() {
  static const bool yes = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("f16c");
  return yes;
}

void reduce_half(std::uint16_t* out, const std::uint16_t* a, const std::uint16_t* b, size_t n,
                 ReduceOp op) {
  reduce_any<Half>(out, a, b, n, op);
}
void reduce_bf16(std::uint16_t* out, const std::uint16_t* a, const std::uint16_t* b, size_t n,
                 ReduceOp op) {
  reduce_any<BFloat16>(out, a, b, n, op);
}
void divide_half(std::uint16_t* p, size_t n, float divisor) { divide_loop<Half>(p, n, divisor); }
void divide_bf16(std::uint16_t* p, size_t n, float divisor) { divide_loop<BFloat16>(p, n, divisor); }
void floats_to_half(const float* src, std::uint16_t* dst, size_t n) { to_16_loop<Half>(src, dst, n); }
void floats_to_bf16(const float* src, std::uint16_t* dst, size_t n) {
  to_16_loop<BFloat16>(src, dst, n);
}
void half_to_floats(const std::uint16_t* src, float* dst, size_t n, float scale) {
  from_16_loop<Half>(src, dst, n, scale);
}
void bf16_to_floats(const std::uint16_t* src, float* dst, size_t n, float scale) {
  from_16_loop<BFloat16>(src, dst, n, scale);
}

#else  // not x86-64: callers never get past available()

bool available() { return false; }
void copy(void* dst, const void* src, size_t bytes) { std::memcpy(dst, src, bytes); }
void copy_to_shared(void* dst, const void* src, size_t bytes) { std::memcpy(dst, src, bytes); }
void store_fence() { std::atomic_thread_fence(std::memory_order_seq_cst); }

void sum_floats_to_both(float* a, float* b, const float* x, const float* y, size_t n,
                        float scale) {
  for (size_t i = 0; i < n; ++i) a[i] = b[i] = (x[i] + y[i]) * scale;  // * 1: the sum's bits
}
void sum_floats_to_shared_and(float* a, float* b, const float* x, const float* y, size_t n,
                              float scale) {
  sum_floats_to_both(a, b, x, y, n, scale);
}
void reduce_half(std::uint16_t*, const std::uint16_t*, const std::uint16_t*, size_t, ReduceOp) {}
void reduce_bf16(std::uint16_t*, const std::uint16_t*, const std::uint16_t*, size_t, ReduceOp) {}
void divide_half(std::uint16_t*, size_t, float) {}
void divide_bf16(std::uint16_t*, size_t, float) {}
void floats_to_half(const float*, std::uint16_t*, size_t) {}
void floats_to_bf16(const float*, std::uint16_t*, size_t) {}
void half_to_floats(const std::uint16_t*, float*, size_t, float) {}
void bf16_to_floats(const std::uint16_t*, float*, size_t, float) {}

#endif

}  // namespace hpct::comm::simd
