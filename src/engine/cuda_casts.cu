#include "engine/cuda_casts.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

namespace hpct::engine::cuda {
namespace {

constexpr int kThreads = 256;

// Grid-stride loops: any n with a bounded grid.
__global__ void to_16(const float* src, std::uint16_t* dst, std::size_t n, bool bf16) {
  for (std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::size_t>(blockDim.x) * gridDim.x) {
    dst[i] = bf16 ? __bfloat16_as_ushort(__float2bfloat16_rn(src[i])) : __half_as_ushort(__float2half_rn(src[i]));
  }
}

__global__ void from_16(const std::uint16_t* src, float* dst, std::size_t n, bool bf16, float scale) {
  for (std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::size_t>(blockDim.x) * gridDim.x) {
    const float f = bf16 ? __bfloat162float(__ushort_as_bfloat16(src[i])) : __half2float(__ushort_as_half(src[i]));
    dst[i] = f * scale;
  }
}

unsigned blocks_for(std::size_t n) {
  const std::size_t b = (n + kThreads - 1) / kThreads;
  return static_cast<unsigned>(b < 4096 ? (b == 0 ? 1 : b) : 4096);
}

}  // namespace

int launch_to_16(const float* src, std::uint16_t* dst, std::size_t n, bool bf16, void* stream) {
  if (n == 0) return 0;
  to_16<<<blocks_for(n), kThreads, 0, static_cast<cudaStream_t>(stream)>>>(src, dst, n, bf16);
  return static_cast<int>(cudaGetLastError());
}

int launch_from_16(const std::uint16_t* src, float* dst, std::size_t n, bool bf16, float scale, void* stream) {
  if (n == 0) return 0;
  from_16<<<blocks_for(n), kThreads, 0, static_cast<cudaStream_t>(stream)>>>(src, dst, n, bf16, scale);
  return static_cast<int>(cudaGetLastError());
}

}  // namespace hpct::engine::cuda
