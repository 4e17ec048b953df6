#include "comm/reduce.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

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

TEST(Reduce, AverageDividesAndRefusesIntegers) {
  double d[2] = {3, 5};
  finish_average(d, 2, DataType::kFloat64, 2);
  EXPECT_EQ(d[0], 1.5);
  EXPECT_THROW(check_reducible(DataType::kInt32, ReduceOp::kAvg), Error);
  EXPECT_NO_THROW(check_reducible(DataType::kBFloat16, ReduceOp::kAvg));
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

}  // namespace
}  // namespace hpct::comm
