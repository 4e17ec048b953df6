#include "comm/reduce.h"

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "comm/reduce_simd.h"
#include "core/error.h"

namespace hpct::comm {
namespace {

template <typename T, typename F>
void apply(void* out, const void* a, const void* b, size_t n, F f) {
  T* o = static_cast<T*>(out);
  const T* x = static_cast<const T*>(a);
  const T* y = static_cast<const T*>(b);
  for (size_t i = 0; i < n; ++i) o[i] = f(x[i], y[i]);
}

template <typename T>
void reduce_typed(void* out, const void* a, const void* b, size_t n, ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kAvg:
      apply<T>(out, a, b, n, [](T x, T y) { return static_cast<T>(x + y); });
      break;
    case ReduceOp::kProduct:
      apply<T>(out, a, b, n, [](T x, T y) { return static_cast<T>(x * y); });
      break;
    case ReduceOp::kMin:
      apply<T>(out, a, b, n, [](T x, T y) { return std::min(x, y); });
      break;
    case ReduceOp::kMax:
      apply<T>(out, a, b, n, [](T x, T y) { return std::max(x, y); });
      break;
  }
}

// 16-bit floats: widen, reduce in float32, round back. Blocks keep the
// temporaries in L1.
template <float (*ToFloat)(std::uint16_t), std::uint16_t (*FromFloat)(float)>
void reduce_16(void* out, const void* a, const void* b, size_t n, ReduceOp op) {
  constexpr size_t kBlock = 256;
  float fa[kBlock], fb[kBlock];
  auto* o = static_cast<std::uint16_t*>(out);
  const auto* x = static_cast<const std::uint16_t*>(a);
  const auto* y = static_cast<const std::uint16_t*>(b);
  for (size_t base = 0; base < n; base += kBlock) {
    const size_t m = std::min(kBlock, n - base);
    for (size_t i = 0; i < m; ++i) {
      fa[i] = ToFloat(x[base + i]);
      fb[i] = ToFloat(y[base + i]);
    }
    reduce_typed<float>(fa, fa, fb, m, op);
    for (size_t i = 0; i < m; ++i) o[base + i] = FromFloat(fa[i]);
  }
}

bool power_of_two(int n) { return n > 0 && (n & (n - 1)) == 0; }

}  // namespace

namespace {

template <typename T>
void sum_then_scale(void* out, const void* a, const void* b, size_t n, int divisor) {
  T* o = static_cast<T*>(out);
  const T* x = static_cast<const T*>(a);
  const T* y = static_cast<const T*>(b);
  const T d = static_cast<T>(divisor);
  if (power_of_two(divisor)) {
    const T inv = T(1) / d;
    for (size_t i = 0; i < n; ++i) o[i] = static_cast<T>(x[i] + y[i]) * inv;
  } else {
    for (size_t i = 0; i < n; ++i) o[i] = static_cast<T>(x[i] + y[i]) / d;
  }
}

}  // namespace

void sum_and_average(void* out, const void* a, const void* b, size_t count, DataType dtype,
                     int divisor) {
  switch (dtype) {
    case DataType::kFloat32: sum_then_scale<float>(out, a, b, count, divisor); return;
    case DataType::kFloat64: sum_then_scale<double>(out, a, b, count, divisor); return;
    default:
      reduce_elements(out, a, b, count, dtype, ReduceOp::kSum);
      finish_average(out, count, dtype, divisor);
      return;
  }
}

template <typename T>
void divide_integers(void* data, size_t count, int divisor) {
  auto* p = static_cast<T*>(data);
  const T d = static_cast<T>(divisor);
  for (size_t i = 0; i < count; ++i) p[i] = static_cast<T>(p[i] / d);
}

void reduce_elements_portable(void* out, const void* a, const void* b, size_t count,
                              DataType dtype, ReduceOp op) {
  switch (dtype) {
    case DataType::kFloat32: reduce_typed<float>(out, a, b, count, op); break;
    case DataType::kFloat64: reduce_typed<double>(out, a, b, count, op); break;
    case DataType::kInt32: reduce_typed<std::int32_t>(out, a, b, count, op); break;
    case DataType::kInt64: reduce_typed<std::int64_t>(out, a, b, count, op); break;
    case DataType::kUInt8: reduce_typed<std::uint8_t>(out, a, b, count, op); break;
    case DataType::kInt8: reduce_typed<std::int8_t>(out, a, b, count, op); break;
    case DataType::kInt16: reduce_typed<std::int16_t>(out, a, b, count, op); break;
    case DataType::kFloat16:
      reduce_16<half_to_float, float_to_half>(out, a, b, count, op);
      break;
    case DataType::kBFloat16:
      reduce_16<bfloat16_to_float, float_to_bfloat16>(out, a, b, count, op);
      break;
  }
}

void finish_average_portable(void* data, size_t count, DataType dtype, int divisor) {
  // Divide rather than multiply by 1/n, so the result is the sum / n a user
  // computes by hand, to the last bit.
  switch (dtype) {
    // Dividing by a power of two is exactly multiplying by its inverse (both
    // round the same exact value), and a multiply costs a fraction of a
    // divide: 2, 4, 8 ranks take that path.
    case DataType::kFloat32: {
      auto* p = static_cast<float*>(data);
      const float n = static_cast<float>(divisor);
      if (power_of_two(divisor)) {
        const float inv = 1.0f / n;
        for (size_t i = 0; i < count; ++i) p[i] *= inv;
      } else {
        for (size_t i = 0; i < count; ++i) p[i] /= n;
      }
      break;
    }
    case DataType::kFloat64: {
      auto* p = static_cast<double*>(data);
      const double n = divisor;
      if (power_of_two(divisor)) {
        const double inv = 1.0 / n;
        for (size_t i = 0; i < count; ++i) p[i] *= inv;
      } else {
        for (size_t i = 0; i < count; ++i) p[i] /= n;
      }
      break;
    }
    case DataType::kFloat16: {
      auto* p = static_cast<std::uint16_t*>(data);
      for (size_t i = 0; i < count; ++i) p[i] = float_to_half(half_to_float(p[i]) / divisor);
      break;
    }
    case DataType::kBFloat16: {
      auto* p = static_cast<std::uint16_t*>(data);
      for (size_t i = 0; i < count; ++i) {
        p[i] = float_to_bfloat16(bfloat16_to_float(p[i]) / divisor);
      }
      break;
    }
    // C++ integer division truncates toward zero, as Horovod's integer average does.
    case DataType::kInt32: divide_integers<std::int32_t>(data, count, divisor); break;
    case DataType::kInt64: divide_integers<std::int64_t>(data, count, divisor); break;
    case DataType::kInt16: divide_integers<std::int16_t>(data, count, divisor); break;
    case DataType::kInt8: divide_integers<std::int8_t>(data, count, divisor); break;
    case DataType::kUInt8: divide_integers<std::uint8_t>(data, count, divisor); break;
  }
}

bool vector_kernels_available() { return simd::available(); }

void reduce_elements(void* out, const void* a, const void* b, size_t count, DataType dtype,
                     ReduceOp op) {
  if ((dtype == DataType::kFloat16 || dtype == DataType::kBFloat16) && simd::available()) {
    auto* o = static_cast<std::uint16_t*>(out);
    const auto* x = static_cast<const std::uint16_t*>(a);
    const auto* y = static_cast<const std::uint16_t*>(b);
    if (dtype == DataType::kFloat16) return simd::reduce_half(o, x, y, count, op);
    return simd::reduce_bf16(o, x, y, count, op);
  }
  reduce_elements_portable(out, a, b, count, dtype, op);
}

void finish_average(void* data, size_t count, DataType dtype, int divisor) {
  if ((dtype == DataType::kFloat16 || dtype == DataType::kBFloat16) && simd::available()) {
    auto* p = static_cast<std::uint16_t*>(data);
    const float d = static_cast<float>(divisor);
    if (dtype == DataType::kFloat16) return simd::divide_half(p, count, d);
    return simd::divide_bf16(p, count, d);
  }
  finish_average_portable(data, count, dtype, divisor);
}

namespace {

void check_16(DataType dtype) {
  if (dtype != DataType::kFloat16 && dtype != DataType::kBFloat16) {
    throw_invalid_argument(std::string("a cast between float32 and ") + dtype_name(dtype) +
                           " was asked for; only float16 and bfloat16 are 16-bit floats");
  }
}

}  // namespace

void floats_to_16_portable(const float* src, std::uint16_t* dst, size_t count, DataType dtype) {
  check_16(dtype);
  if (dtype == DataType::kFloat16) {
    for (size_t i = 0; i < count; ++i) dst[i] = float_to_half(src[i]);
  } else {
    for (size_t i = 0; i < count; ++i) dst[i] = float_to_bfloat16(src[i]);
  }
}

void floats_from_16_portable(const std::uint16_t* src, float* dst, size_t count, DataType dtype,
                             float scale) {
  check_16(dtype);
  if (dtype == DataType::kFloat16) {
    for (size_t i = 0; i < count; ++i) dst[i] = half_to_float(src[i]) * scale;
  } else {
    for (size_t i = 0; i < count; ++i) dst[i] = bfloat16_to_float(src[i]) * scale;
  }
}

void floats_to_16(const float* src, std::uint16_t* dst, size_t count, DataType dtype) {
  check_16(dtype);
  if (!simd::available()) return floats_to_16_portable(src, dst, count, dtype);
  if (dtype == DataType::kFloat16) return simd::floats_to_half(src, dst, count);
  simd::floats_to_bf16(src, dst, count);
}

void floats_from_16(const std::uint16_t* src, float* dst, size_t count, DataType dtype,
                    float scale) {
  check_16(dtype);
  if (!simd::available()) return floats_from_16_portable(src, dst, count, dtype, scale);
  if (dtype == DataType::kFloat16) return simd::half_to_floats(src, dst, count, scale);
  simd::bf16_to_floats(src, dst, count, scale);
}

void reduce_in_order(void* out, const std::vector<const void*>& blocks, size_t count, DataType dtype,
                     ReduceOp op) {
  const size_t n = blocks.size();
  if (n == 0 || count == 0) return;
  if (n == 1) {
    if (out != blocks[0]) std::memmove(out, blocks[0], count * dtype_size(dtype));
    return;
  }
  for (size_t q = 1; q < n; ++q) {
    const void* acc = q == 1 ? blocks[0] : out;
    if (op == ReduceOp::kAvg && q == n - 1) {
      sum_and_average(out, acc, blocks[q], count, dtype, static_cast<int>(n));
    } else {
      reduce_elements(out, acc, blocks[q], count, dtype, op);
    }
  }
}

}  // namespace hpct::comm
