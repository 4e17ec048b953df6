// x86 vector kernels for the 16-bit float dtypes, behind reduce.h.
//
// Each kernel gives the same bits as the portable code in reduce.cc and
// types.cc (tested bit for bit in reduce_test.cc): F16C converts with round
// to nearest even and NaNs are made quiet the portable way; bfloat16 rounds
// with the same integer arithmetic, eight lanes at a time (AVX2). The caller
// checks the CPU first (available()) and keeps the portable path for
// other CPUs. Pure functions, thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>

#include "comm/types.h"

namespace hpct::comm::simd {

// True when this CPU has AVX2 and F16C (every kernel below needs both).
bool available();

// memcpy for the shared-memory allreduce's slot copies (tens of KB to MBs of
// data another core wrote or will read): 32-byte vector loads and stores on
// CPUs with AVX2, which move such data faster than glibc's `rep movsb` on
// the AMD EPYC hosts measured (docs/comm.md); memcpy elsewhere. Any CPU.
void copy(void* dst, const void* src, size_t bytes);

// a[i] = b[i] = (x[i] + y[i]) * scale (float32, the same bits as the scalar
// expression): the two-rank shared-memory allreduce's one pass that stores
// the sum (scale 1) or the average (0.5: the same bits as the sum divided
// by 2, as sum_and_average() gives) to its slot and to the output. 8 lanes
// on CPUs with AVX2; scalar elsewhere.
void sum_floats_to_both(float* a, float* b, const float* x, const float* y, size_t n,
                        float scale);

// copy() and sum_floats_to_both() for stores into memory another core reads
// next and has read before (a shared-memory slot): dst (a) is written with
// non-temporal stores, which take no ownership of lines the other core
// still holds. They are not ordered before later stores: the caller calls
// store_fence() once after its last such copy and before the store that
// publishes them. An sfence waits until the stores in flight have left
// the core: a 512 KiB copy with one per 4 KiB took 31 us instead of 12, and
// one per 16 KiB block made a 1 MiB allreduce 4-8% slower (docs/comm.md).
// On the VM measured the normal stores into such lines ran at 12 GB/s and,
// in stretches where a cache line took 5x longer to cross between its two
// vCPUs, at 2.5-7 GB/s; the non-temporal ones at 28-44 GB/s in both
// (docs/comm.md). The same bits as copy() and sum_floats_to_both(); plain
// stores on CPUs without AVX2.
void copy_to_shared(void* dst, const void* src, size_t bytes);
void sum_floats_to_shared_and(float* a, float* b, const float* x, const float* y, size_t n,
                              float scale);
// Orders the non-temporal stores above before every later store (sfence).
void store_fence();

// out[i] = round16(float(a[i]) op float(b[i])); kAvg reduces as kSum.
void reduce_half(std::uint16_t* out, const std::uint16_t* a, const std::uint16_t* b, size_t n,
                 ReduceOp op);
void reduce_bf16(std::uint16_t* out, const std::uint16_t* a, const std::uint16_t* b, size_t n,
                 ReduceOp op);
// p[i] = round16(float(p[i]) / divisor)
void divide_half(std::uint16_t* p, size_t n, float divisor);
void divide_bf16(std::uint16_t* p, size_t n, float divisor);
// Casts: dst = round16(src), and dst = float(src) * scale.
void floats_to_half(const float* src, std::uint16_t* dst, size_t n);
void floats_to_bf16(const float* src, std::uint16_t* dst, size_t n);
void half_to_floats(const std::uint16_t* src, float* dst, size_t n, float scale);
void bf16_to_floats(const std::uint16_t* src, float* dst, size_t n, float scale);

}  // namespace hpct::comm::simd
