// The float32 <-> 16-bit casts of CudaDevice as CUDA kernels (cuda_casts.cu).
// Internal to hpct_engine_cuda; the stream is a cudaStream_t.
#pragma once

#include <cstddef>
#include <cstdint>

namespace hpct::engine::cuda {

// Enqueue on `stream`; return the launch's cudaError_t (as int: no CUDA
// header here).
int launch_to_16(const float* src, std::uint16_t* dst, std::size_t n, bool bf16, void* stream);
int launch_from_16(const std::uint16_t* src, float* dst, std::size_t n, bool bf16, float scale, void* stream);

}  // namespace hpct::engine::cuda
