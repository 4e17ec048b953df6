#include "comm/reduce.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include "comm/reduce_simd.h"
#include "core/error.h"

namespace hpct::comm {
namespace {

TEST(Types, HalfRoundTripsEveryFiniteValue) {
  for (std::uint32_t h = 0; h < 0x10000; ++h) {
    if ((h & 0x7c00u) == 0x7c00u) continue;  // inf/nan
    float f = half_to_float(static_cast<std::uint16_t>(h));
    EXPECT_EQ(float_to_half(f), h) << "half bits " << h;
  }
}

TEST(Types, HalfRoundsToNearestEven) {
  EXPECT_EQ(half_to_float(float_to_half(1.0f + 1.0f / 2048)), 1.0f);           // tie -> even
  EXPECT_EQ(half_to_float(float_to_half(1.0f + 3.0f / 2048)), 1.0f + 2.0f / 1024);  // tie -> even up
  EXPECT_TRUE(std::isinf(half_to_float(float_to_half(70000.0f))));
  EXPECT_EQ(half_to_float(float_to_half(65504.0f)), 65504.0f);
  EXPECT_EQ(half_to_float(float_to_half(5.9604645e-08f)), 5.9604645e-08f);  // smallest subnormal
}

TEST(Types, BFloat16RoundTripAndRounding) {
  for (std::uint32_t b = 0; b < 0x10000; b += 7) {
    if ((b & 0x7f80u) == 0x7f80u) continue;
    float f = bfloat16_to_float(static_cast<std::uint16_t>(b));
    EXPECT_EQ(float_to_bfloat16(f), b);
  }
  EXPECT_EQ(bfloat16_to_float(float_to_bfloat16(1.0f + 1.0f / 256)), 1.0f);  // tie -> even
}

TEST(Reduce, EveryOpOnFloatAndInt) {
  float a[3] = {1, -2, 3}, b[3] = {4, 5, -6}, out[3];
  reduce_elements(out, a, b, 3, DataType::kFloat32, ReduceOp::kSum);
  EXPECT_EQ(out[1], 3.0f);
  reduce_elements(out, a, b, 3, DataType::kFloat32, ReduceOp::kMin);
  EXPECT_EQ(out[2], -6.0f);
  reduce_elements(out, a, b, 3, DataType::kFloat32, ReduceOp::kMax);
  EXPECT_EQ(out[0], 4.0f);
  reduce_elements(out, a, b, 3, DataType::kFloat32, ReduceOp::kProduct);
  EXPECT_EQ(out[2], -18.0f);
  std::int64_t x[2] = {1LL << 40, -1}, y[2] = {1, -1}, z[2];
  reduce_elements(z, x, y, 2, DataType::kInt64, ReduceOp::kSum);
  EXPECT_EQ(z[0], (1LL << 40) + 1);
  EXPECT_EQ(z[1], -2);
}

TEST(Reduce, HalfSumsInFloat) {
  std::uint16_t a[300], b[300], out[300];
  for (int i = 0; i < 300; ++i) {
    a[i] = float_to_half(static_cast<float>(i));
    b[i] = float_to_half(0.5f);
  }
  reduce_elements(out, a, b, 300, DataType::kFloat16, ReduceOp::kSum);
  for (int i = 0; i < 300; ++i) EXPECT_EQ(half_to_float(out[i]), i + 0.5f) << i;
}

TEST(Reduce, AverageDividesFloatsAndTruncatesIntegersTowardZero) {
  double d[2] = {3, 5};
  finish_average(d, 2, DataType::kFloat64, 2);
  EXPECT_EQ(d[0], 1.5);
  // Horovod's average of an integer tensor: the sum over ranks, divided and
  // truncated toward zero (-7 / 2 is -3, not -4).
  std::int32_t i32[3] = {7, -7, 6};
  finish_average(i32, 3, DataType::kInt32, 2);
  EXPECT_EQ(i32[0], 3);
  EXPECT_EQ(i32[1], -3);
  EXPECT_EQ(i32[2], 3);
  std::int8_t i8[2] = {-100, 101};
  finish_average(i8, 2, DataType::kInt8, 3);
  EXPECT_EQ(i8[0], -33);
  EXPECT_EQ(i8[1], 33);
  std::int16_t i16[1] = {-30001};
  finish_average(i16, 1, DataType::kInt16, 2);
  EXPECT_EQ(i16[0], -15000);
}


// The power-of-two path multiplies by the inverse: it must give the
// division's bits for every value, subnormals and extremes included.
TEST(Reduce, AverageOverPowerOfTwoRanksIsTheDivisionToTheLastBit) {
  std::vector<float> f;
  std::vector<double> d;
  std::uint32_t bits = 12345;
  for (int i = 0; i < 200000; ++i) {
    bits = bits * 1664525u + 1013904223u;  // every exponent, subnormals too
    float x;
    std::memcpy(&x, &bits, sizeof x);
    if (std::isfinite(x)) f.push_back(x);
    d.push_back(static_cast<double>(x) * 1e-300);
  }
  f.push_back(std::numeric_limits<float>::denorm_min());
  f.push_back(std::numeric_limits<float>::max());
  for (int n : {2, 4, 8, 3}) {
    std::vector<float> fa = f;
    std::vector<double> da = d;
    finish_average(fa.data(), fa.size(), DataType::kFloat32, n);
    finish_average(da.data(), da.size(), DataType::kFloat64, n);
    for (size_t i = 0; i < f.size(); ++i) {
      const float want = f[i] / static_cast<float>(n);
      ASSERT_EQ(std::memcmp(&fa[i], &want, sizeof want), 0) << f[i] << " / " << n;
    }
    for (size_t i = 0; i < d.size(); ++i) {
      const double want = d[i] / n;
      ASSERT_EQ(std::memcmp(&da[i], &want, sizeof want), 0) << d[i] << " / " << n;
    }
  }
}

TEST(Reduce, SumAndAverageIsTheSumThenTheDivisionToTheLastBit) {
  std::uint32_t bits = 777;
  auto next = [&bits] {
    bits = bits * 1664525u + 1013904223u;
    float x;
    std::memcpy(&x, &bits, sizeof x);
    return std::isfinite(x) ? x : 1.0f;
  };
  std::vector<float> a(50000), b(50000);
  for (size_t i = 0; i < a.size(); ++i) {
    a[i] = next();
    b[i] = i % 3 == 0 ? -a[i] * 0.75f : next();
  }
  for (int n : {2, 4, 3}) {
    std::vector<float> fused(a.size()), split(a.size());
    sum_and_average(fused.data(), a.data(), b.data(), a.size(), DataType::kFloat32, n);
    reduce_elements(split.data(), a.data(), b.data(), a.size(), DataType::kFloat32, ReduceOp::kSum);
    finish_average(split.data(), split.size(), DataType::kFloat32, n);
    ASSERT_EQ(std::memcmp(fused.data(), split.data(), fused.size() * sizeof(float)), 0) << n;
  }
}

// ---- the vector kernels against the portable ones, bit for bit ----

// Random bit patterns cover every exponent: subnormals, infinities and NaNs
// (quiet and signalling, either sign) included.
std::vector<std::uint8_t> random_bytes(size_t n, std::uint32_t seed) {
  std::vector<std::uint8_t> v(n);
  for (auto& b : v) {
    seed = seed * 1664525u + 1013904223u;
    b = static_cast<std::uint8_t>(seed >> 24);
  }
  return v;
}

// Bit for bit, except where both inputs of an element are NaN: x86 returns
// the first NaN operand of an add or multiply and the compiler may order the
// operands either way, so there the result must be a NaN, of either sign.
::testing::AssertionResult SameBits(const std::vector<std::uint8_t>& got,
                                    const std::vector<std::uint8_t>& want,
                                    const std::vector<std::uint8_t>& a,
                                    const std::vector<std::uint8_t>& b, size_t n, DataType t) {
  if (got == want) return ::testing::AssertionSuccess();
  const size_t w = dtype_size(t);
  auto nan_at = [&](const std::vector<std::uint8_t>& v, size_t i) {
    if (t == DataType::kFloat16 || t == DataType::kBFloat16) {
      std::uint16_t h;
      std::memcpy(&h, v.data() + i * 2, 2);
      return std::isnan(t == DataType::kFloat16 ? half_to_float(h) : bfloat16_to_float(h));
    }
    if (t == DataType::kFloat32) {  // the two-rank average: a vector kernel against reduce.cc
      float f;
      std::memcpy(&f, v.data() + i * 4, 4);
      return std::isnan(f);
    }
    return false;  // float64 and integers run the same code on both paths
  };
  for (size_t i = 0; i < got.size(); ++i) {
    if (got[i] == want[i]) continue;
    const size_t e = i / w;
    if (e < n && nan_at(got, e) && nan_at(want, e) && nan_at(a, e) && nan_at(b, e)) continue;
    return ::testing::AssertionFailure() << "byte " << i << " (element " << e << ") differs";
  }
  return ::testing::AssertionSuccess();
}

const DataType kAllTypes[] = {DataType::kFloat32, DataType::kFloat64, DataType::kFloat16,
                              DataType::kBFloat16, DataType::kInt32,   DataType::kInt64,
                              DataType::kUInt8};
const ReduceOp kAllOps[] = {ReduceOp::kSum, ReduceOp::kAvg, ReduceOp::kMin, ReduceOp::kMax,
                            ReduceOp::kProduct};
// 0, 1, odd, a vector's width and either side of it, several vectors plus a tail, large.
const size_t kCounts[] = {0, 1, 7, 8, 9, 17, 1001, (1u << 20) + 3};

TEST(ReduceVector, EveryDtypeOpAndSizeGivesThePortableBits) {
  if (!vector_kernels_available()) GTEST_SKIP() << "no AVX2/F16C on this CPU: only the portable path runs";
  for (DataType t : kAllTypes) {
    const size_t w = dtype_size(t);
    for (ReduceOp op : kAllOps) {
      if (op == ReduceOp::kAvg && !is_floating(t)) continue;
      for (size_t n : kCounts) {
        auto a = random_bytes(n * w + 1, static_cast<std::uint32_t>(n * 31 + w));
        auto b = random_bytes(n * w + 1, static_cast<std::uint32_t>(n * 17 + 5));
        std::vector<std::uint8_t> fast(n * w + 1, 0xab), slow(n * w + 1, 0xab);
        reduce_elements(fast.data(), a.data(), b.data(), n, t, op);
        reduce_elements_portable(slow.data(), a.data(), b.data(), n, t, op);
        ASSERT_TRUE(SameBits(fast, slow, a, b, n, t))
            << dtype_name(t) << " " << reduce_op_name(op) << " n=" << n;
        // In place (out aliases a), as the backends call it.
        std::vector<std::uint8_t> in_place = a;
        reduce_elements(in_place.data(), in_place.data(), b.data(), n, t, op);
        in_place[n * w] = 0xab;
        ASSERT_TRUE(SameBits(in_place, slow, a, b, n, t))
            << "in place " << dtype_name(t) << " " << reduce_op_name(op);
      }
    }
  }
}

// sum_floats_to_both() with `scale` against `reference` (out, x, y, n), on
// random bits (NaN, infinities, subnormals): both outputs hold its bits,
// nothing is written past the end.
void expect_to_both_gives(float scale, std::uint32_t seed,
                          void (*reference)(void*, const void*, const void*, size_t)) {
  for (size_t n : kCounts) {
    auto x = random_bytes(n * 4 + 4, static_cast<std::uint32_t>(n * 7 + seed));
    auto y = random_bytes(n * 4 + 4, static_cast<std::uint32_t>(n * 13 + seed + 1));
    std::vector<std::uint8_t> a(n * 4 + 4, 0xab), b(n * 4 + 4, 0xcd), want(n * 4 + 4, 0xab);
    simd::sum_floats_to_both(reinterpret_cast<float*>(a.data()), reinterpret_cast<float*>(b.data()),
                             reinterpret_cast<const float*>(x.data()),
                             reinterpret_cast<const float*>(y.data()), n, scale);
    reference(want.data(), x.data(), y.data(), n);
    ASSERT_TRUE(SameBits(a, want, x, y, n, DataType::kFloat32)) << "slot, n=" << n;
    b[n * 4] = 0xab, b[n * 4 + 1] = 0xab, b[n * 4 + 2] = 0xab, b[n * 4 + 3] = 0xab;
    ASSERT_TRUE(SameBits(b, want, x, y, n, DataType::kFloat32)) << "output, n=" << n;
    EXPECT_EQ(a[n * 4], 0xab) << "wrote past the end, n=" << n;
  }
}

// The two-rank shared-memory sum's fused store: both outputs hold the
// portable float32 sum's bits.
TEST(ReduceVector, SumToBothStoresThePortableSumTwice) {
  expect_to_both_gives(1.0f, 1, [](void* out, const void* x, const void* y, size_t n) {
    reduce_elements_portable(out, x, y, n, DataType::kFloat32, ReduceOp::kSum);
  });
}

// Its average of two ranks (scale 0.5): both outputs hold the bits of
// sum_and_average() over 2, the general path's average.
TEST(ReduceVector, AverageToBothStoresTheSumDividedByTwoTwice) {
  expect_to_both_gives(0.5f, 5, [](void* out, const void* x, const void* y, size_t n) {
    sum_and_average(out, x, y, n, DataType::kFloat32, 2);
  });
}

// The non-temporal stores into a shared slot: the same bits as the plain
// kernels, at every alignment of the destination (they stream from its
// first 32-byte boundary), with nothing written past the end.
TEST(ReduceVector, StoresIntoSharedMemoryGiveThePlainKernelsBits) {
  for (size_t n : kCounts) {
    for (size_t shift : {0, 4, 12, 28}) {
      auto x = random_bytes(n * 4 + 4, static_cast<std::uint32_t>(n * 5 + shift));
      auto y = random_bytes(n * 4 + 4, static_cast<std::uint32_t>(n * 11 + shift));
      for (float scale : {1.0f, 0.5f}) {  // the sum and the average of two ranks
        std::vector<std::uint8_t> a(n * 4 + 64, 0xab), b(n * 4 + 4, 0xcd),
            want_a(n * 4 + 64, 0xab), want_b(n * 4 + 4, 0xcd);
        auto* slot = reinterpret_cast<float*>(a.data() + shift);
        simd::sum_floats_to_shared_and(slot, reinterpret_cast<float*>(b.data()),
                                       reinterpret_cast<const float*>(x.data()),
                                       reinterpret_cast<const float*>(y.data()), n, scale);
        simd::sum_floats_to_both(reinterpret_cast<float*>(want_a.data() + shift),
                                 reinterpret_cast<float*>(want_b.data()),
                                 reinterpret_cast<const float*>(x.data()),
                                 reinterpret_cast<const float*>(y.data()), n, scale);
        ASSERT_EQ(a, want_a) << "slot, n=" << n << " shift=" << shift << " scale=" << scale;
        ASSERT_EQ(b, want_b) << "output, n=" << n << " shift=" << shift << " scale=" << scale;
      }

      std::vector<std::uint8_t> c(n * 4 + 64, 0xee), want_c(n * 4 + 64, 0xee);
      simd::copy_to_shared(c.data() + shift, x.data(), n * 4 + 3);
      std::memcpy(want_c.data() + shift, x.data(), n * 4 + 3);
      ASSERT_EQ(c, want_c) << "copy, n=" << n << " shift=" << shift;
    }
  }
}

TEST(ReduceVector, AverageOf16BitFloatsGivesThePortableBits) {
  if (!vector_kernels_available()) GTEST_SKIP() << "no AVX2/F16C on this CPU";
  for (DataType t : {DataType::kFloat16, DataType::kBFloat16}) {
    for (int divisor : {1, 2, 3, 4, 7}) {
      for (size_t n : kCounts) {
        auto fast = random_bytes(n * 2, static_cast<std::uint32_t>(n + divisor));
        auto slow = fast;
        finish_average(fast.data(), n, t, divisor);
        finish_average_portable(slow.data(), n, t, divisor);
        ASSERT_EQ(fast, slow) << dtype_name(t) << " / " << divisor << " n=" << n;
        auto a = random_bytes(n * 2, 3), b = random_bytes(n * 2, 4);
        std::vector<std::uint8_t> fused(n * 2), split(n * 2);
        sum_and_average(fused.data(), a.data(), b.data(), n, t, divisor);
        reduce_elements_portable(split.data(), a.data(), b.data(), n, t, ReduceOp::kSum);
        finish_average_portable(split.data(), n, t, divisor);
        ASSERT_TRUE(SameBits(fused, split, a, b, n, t)) << "sum_and_average " << dtype_name(t) << " n=" << n;
      }
    }
  }
}

TEST(ReduceVector, EveryHalfAndBFloat16ValueWidensToThePortableFloat) {
  std::vector<std::uint16_t> all(0x10000);
  for (std::uint32_t i = 0; i < all.size(); ++i) all[i] = static_cast<std::uint16_t>(i);
  for (DataType t : {DataType::kFloat16, DataType::kBFloat16}) {
    for (float scale : {1.0f, 0.5f, 1.0f / 3}) {
      std::vector<float> fast(all.size()), slow(all.size());
      floats_from_16(all.data(), fast.data(), all.size(), t, scale);
      floats_from_16_portable(all.data(), slow.data(), all.size(), t, scale);
      ASSERT_EQ(std::memcmp(fast.data(), slow.data(), fast.size() * 4), 0) << dtype_name(t);
    }
    // And each value survives the trip back (NaNs become the quiet NaN).
    std::vector<float> f(all.size());
    floats_from_16_portable(all.data(), f.data(), f.size(), t, 1.0f);
    std::vector<std::uint16_t> back(all.size());
    floats_to_16(f.data(), back.data(), f.size(), t);
    for (std::uint32_t i = 0; i < all.size(); ++i) {
      if (!std::isnan(f[i])) {
        ASSERT_EQ(back[i], all[i]) << dtype_name(t) << " bits " << i;
      }
    }
  }
}

TEST(ReduceVector, FloatsNarrowToThePortableBitsIncludingTiesNaNAndOverflow) {
  // Random bit patterns, plus the float values at and around every rounding
  // boundary that matters: half's overflow (65504, 65520), the subnormal
  // half range, bfloat16 ties.
  std::vector<float> f;
  auto bytes = random_bytes(4 * ((1u << 20) + 5), 99);
  f.resize(bytes.size() / 4);
  std::memcpy(f.data(), bytes.data(), bytes.size());
  for (std::uint32_t bits : {0x477fe000u, 0x477ff000u, 0x477fefffu, 0x477ff001u, 0x33000000u,
                             0x33000001u, 0x387fe000u, 0x38800000u, 0x3f808000u, 0x3f818000u,
                             0x7f7fffffu, 0x7f800000u, 0xff800000u, 0x7fc00001u, 0x7f800001u,
                             0xffbfffffu, 0x80000000u, 0x00000001u}) {
    float x;
    std::memcpy(&x, &bits, 4);
    f.push_back(x);
  }
  for (DataType t : {DataType::kFloat16, DataType::kBFloat16}) {
    for (size_t n : {size_t{0}, size_t{1}, size_t{7}, size_t{9}, f.size()}) {
      const float* src = f.data() + f.size() - n;  // the special values sit at the end
      std::vector<std::uint16_t> fast(n + 1, 0x1234), slow(n + 1, 0x1234);
      floats_to_16(src, fast.data(), n, t);
      floats_to_16_portable(src, slow.data(), n, t);
      ASSERT_EQ(fast, slow) << dtype_name(t) << " n=" << n;
    }
  }
  std::uint16_t out;
  EXPECT_THROW(floats_to_16(f.data(), &out, 1, DataType::kFloat32), Error);
}

}  // namespace
}  // namespace hpct::comm
