// Gradient compression: float32 tensors cast to float16 or bfloat16 before
// the collective and back after it. The backends reduce 16-bit floats in
// float32 and round once per step (comm/reduce.h), so only the wire and the
// final value are 16-bit.
//
// The casts cost CPU that a rank sharing its core with compute pays in full
// (shared/notes: fp16 made Horovod 20% slower on one host), so they are
// vectorized (F16C when the CPU has it) and the averaging division is folded
// into the cast back. Pure functions, thread-safe.
#pragma once

#include <cstddef>

#include "engine/message.h"

namespace hpct::engine {

// dst (n 16-bit values) = src rounded to the wire type, nearest even.
void compress(const float* src, void* dst, std::size_t n, Compression c);
// dst = float(src) * scale.
void decompress(const void* src, float* dst, std::size_t n, Compression c, float scale);
// The wire dtype of a compressed float32 tensor.
comm::DataType wire_dtype(Compression c);

}  // namespace hpct::engine
