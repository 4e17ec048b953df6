// Element types and reduction operators that the communicators move and apply.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace hpct::comm {

enum class DataType { kFloat32, kFloat64, kFloat16, kBFloat16, kInt32, kInt64, kUInt8, kInt8, kInt16 };
enum class ReduceOp { kSum, kAvg, kMin, kMax, kProduct };

size_t dtype_size(DataType t);
const char* dtype_name(DataType t);  // "float32", ...
const char* reduce_op_name(ReduceOp op);  // "sum", ...
bool is_floating(DataType t);

// Parse "float32"/"fp32"/"f32", "sum"/"avg"/...; InvalidArgument listing the choices otherwise.
DataType parse_dtype(const std::string& s);
ReduceOp parse_reduce_op(const std::string& s);

// IEEE half and bfloat16 <-> float, round to nearest even.
std::uint16_t float_to_half(float f);
float half_to_float(std::uint16_t h);
std::uint16_t float_to_bfloat16(float f);
float bfloat16_to_float(std::uint16_t b);

}  // namespace hpct::comm
