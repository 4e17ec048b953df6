// Element-wise reduction kernels shared by the backends.
//
// Gloo takes a reduction function, MPI a user-defined op for the types it has
// no built-in for (float16, bfloat16); both call these, so every backend
// reduces every (dtype, op) the same way. float16 and bfloat16 are reduced in
// float32 and rounded once per step.
//
// The 16-bit paths run vectorized (F16C, AVX2; reduce_simd.h) when the CPU
// has them; the portable code stays as the reference, and the *_portable
// functions below run it on any CPU so tests can hold the two to the same
// bits.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "comm/types.h"

namespace hpct::comm {

// out[i] = a[i] op b[i]. out may alias a or b. kAvg reduces as kSum; the
// caller divides once at the end (finish_average).
void reduce_elements(void* out, const void* a, const void* b, size_t count, DataType dtype,
                     ReduceOp op);

// data[i] /= divisor, for kAvg after a sum. Integer dtypes truncate toward
// zero, as Horovod's average of an integer tensor does.
void finish_average(void* data, size_t count, DataType dtype, int divisor);

// out[i] = (a[i] + b[i]) / divisor: kAvg's last reduction step and the
// division in one pass, with the same bits as reduce_elements(kSum) followed
// by finish_average. out may alias a or b.
void sum_and_average(void* out, const void* a, const void* b, size_t count, DataType dtype,
                     int divisor);

// out = ((blocks[0] op blocks[1]) op blocks[2]) ..., count elements each, in
// that order, then divided by blocks.size() for kAvg: the rank order the
// shared-memory allreduce sums in, which every reduce-scatter with per-rank
// counts keeps (communicator.h). One block: a copy. out may alias blocks[0].
void reduce_in_order(void* out, const std::vector<const void*>& blocks, size_t count, DataType dtype,
                     ReduceOp op);

// Casts between float32 and a 16-bit float dtype (kFloat16 or kBFloat16),
// with the bits of float_to_half / float_to_bfloat16 and back:
// dst[i] = round16(src[i]); dst[i] = float(src[i]) * scale.
void floats_to_16(const float* src, std::uint16_t* dst, size_t count, DataType dtype);
void floats_from_16(const std::uint16_t* src, float* dst, size_t count, DataType dtype,
                    float scale);

// True when the 16-bit kernels above run vectorized on this CPU.
bool vector_kernels_available();

// The portable code of the functions above, whatever the CPU.
void reduce_elements_portable(void* out, const void* a, const void* b, size_t count,
                              DataType dtype, ReduceOp op);
void finish_average_portable(void* data, size_t count, DataType dtype, int divisor);
void floats_to_16_portable(const float* src, std::uint16_t* dst, size_t count, DataType dtype);
void floats_from_16_portable(const std::uint16_t* src, float* dst, size_t count, DataType dtype,
                             float scale);

}  // namespace hpct::comm
