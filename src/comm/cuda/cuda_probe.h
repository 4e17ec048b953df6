// Is there a CUDA GPU this process can use? For the parts that choose between
// CPU and GPU at run time (train --device, doctor, the GPU tests' skip).
//
// No CUDA header and no link dependency: the probe loads the NVIDIA driver
// (libcuda.so.1) and the CUDA runtime (libcudart) with dlopen when called,
// so a program that calls it still runs where neither is installed.
#pragma once

#include <string>

namespace hpct::comm {

// The number of CUDA devices this process sees (0 when none), and in *why,
// when why is not null and the answer is 0, the reason in words: "no NVIDIA
// driver (libcuda.so.1 not found)", "CUDA runtime: no CUDA-capable device is
// detected", ... Never throws. Thread-safe. Loads the libraries on the first
// call and keeps them loaded.
int cuda_device_count(std::string* why);

// cuda_device_count(why) > 0.
bool cuda_available(std::string* why);

}  // namespace hpct::comm
