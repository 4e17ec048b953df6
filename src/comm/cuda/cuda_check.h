// Private to comm's CUDA files and the CUDA plugin (src/train/cuda_plugin/);
// .cc files only: it includes the CUDA runtime's header. CUDA errors as
// hpct::Error, the current-device guard, and the nap between polls of a
// bounded wait.
#pragma once

#include <cuda_runtime_api.h>

#include <chrono>
#include <string>
#include <thread>

#include "core/error.h"

namespace hpct::comm::cuda {

// Io naming what failed and CUDA's reason; nothing on cudaSuccess.
inline void check(cudaError_t rc, const std::string& what) {
  if (rc != cudaSuccess) {
    throw Error(ErrorCode::kIo,
                what + ": " + cudaGetErrorString(rc) + " (" + cudaGetErrorName(rc) + ")");
  }
}

// Makes `device` current for this thread for the guard's life, then restores
// the previous one (CUDA's current device is per thread, and a caller's
// choice must survive our calls).
class DeviceGuard {
 public:
  DeviceGuard(int device, const std::string& what) {
    check(cudaGetDevice(&previous_), what + ": cudaGetDevice");
    if (previous_ != device)
      check(cudaSetDevice(device), what + ": cudaSetDevice(" + std::to_string(device) + ")");
  }
  ~DeviceGuard() {
    int now = previous_;
    if (cudaGetDevice(&now) == cudaSuccess && now != previous_) cudaSetDevice(previous_);
  }
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int previous_ = 0;
};

// Between two polls of a bounded wait: a few yields (a small op is done in
// microseconds), then sleeps growing to 1 ms, so a wait for a peer that is
// still computing does not spin a core that a 2-core rank computes on.
class PollNap {
 public:
  void operator()() {
    if (polls_++ < 64) {
      std::this_thread::yield();
      return;
    }
    std::this_thread::sleep_for(nap_);
    if (nap_ < std::chrono::microseconds(1000)) nap_ *= 2;
  }

 private:
  int polls_ = 0;
  std::chrono::microseconds nap_{10};
};

}  // namespace hpct::comm::cuda
