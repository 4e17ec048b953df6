#include "comm/cuda/device_memory.h"

#include <cstdlib>
#include <cstring>

#include "core/error.h"

namespace hpct::comm {

void* HostDeviceMemory::alloc_pinned(size_t bytes) {
  void* p = std::malloc(bytes);
  if (p == nullptr) {
    throw Error(ErrorCode::kIo,
                "staging buffer of " + std::to_string(bytes) + " bytes: out of host memory");
  }
  return p;
}

void HostDeviceMemory::free_pinned(void* p) noexcept { std::free(p); }

void HostDeviceMemory::copy_to_host(void* host, const void* device, size_t bytes) {
  if (bytes > 0) std::memcpy(host, device, bytes);
}

void HostDeviceMemory::copy_to_device(void* device, const void* host, size_t bytes) {
  if (bytes > 0) std::memcpy(device, host, bytes);
}

}  // namespace hpct::comm
