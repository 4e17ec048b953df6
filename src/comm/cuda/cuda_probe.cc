#include "comm/cuda/cuda_probe.h"

#include <dlfcn.h>

// The CUDA runtime's soname for the CUDA major version torch was built with
// (CMake passes it); others are tried after it.
#ifndef HPCT_CUDART_SONAME
#define HPCT_CUDART_SONAME "libcudart.so.13"
#endif

namespace hpct::comm {
namespace {

void say(std::string* why, const std::string& reason) {
  if (why != nullptr) *why = reason;
}

// dlopen's handle for the first of names that loads; null (and the last
// error in *error) when none does. The handle is never closed: unloading the
// CUDA runtime under a running program is not safe.
void* open_first(const char* const* names, std::string* error) {
  for (const char* const* n = names; *n != nullptr; ++n) {
    if (void* h = dlopen(*n, RTLD_NOW | RTLD_LOCAL)) return h;
    const char* e = dlerror();
    *error = e != nullptr ? e : *n;
  }
  return nullptr;
}

int probe(std::string* why) {
  std::string error;
  static const char* const kDriver[] = {"libcuda.so.1", nullptr};
  if (open_first(kDriver, &error) == nullptr) {
    say(why,
        "no NVIDIA driver: libcuda.so.1 not found (this machine has no GPU, or its "
        "driver is not installed)");
    return 0;
  }
  static const char* const kRuntime[] = {HPCT_CUDART_SONAME, "libcudart.so.13", "libcudart.so.12",
                                         "libcudart.so", nullptr};
  void* rt = open_first(kRuntime, &error);
  if (rt == nullptr) {
    say(why, "no CUDA runtime: " + std::string(HPCT_CUDART_SONAME) + " not found (" + error +
                 "); install the CUDA toolkit torch was built for or add its lib directory to "
                 "LD_LIBRARY_PATH");
    return 0;
  }
  using GetDeviceCount = int (*)(int*);
  using GetErrorString = const char* (*)(int);
  auto count_fn = reinterpret_cast<GetDeviceCount>(dlsym(rt, "cudaGetDeviceCount"));
  auto error_fn = reinterpret_cast<GetErrorString>(dlsym(rt, "cudaGetErrorString"));
  if (count_fn == nullptr) {
    say(why, "the CUDA runtime has no cudaGetDeviceCount");
    return 0;
  }
  int count = 0;
  const int rc = count_fn(&count);
  if (rc != 0) {
    const char* text = error_fn != nullptr ? error_fn(rc) : nullptr;
    say(why, "CUDA runtime: " + std::string(text != nullptr ? text : "error") + " (cudaError " +
                 std::to_string(rc) + ")");
    return 0;
  }
  if (count == 0) say(why, "CUDA runtime: no CUDA devices (check CUDA_VISIBLE_DEVICES)");
  return count;
}

}  // namespace

int cuda_device_count(std::string* why) {
  try {
    return probe(why);
  } catch (...) {  // std::string's bad_alloc: never let it out
    return 0;
  }
}

bool cuda_available(std::string* why) { return cuda_device_count(why) > 0; }

}  // namespace hpct::comm
