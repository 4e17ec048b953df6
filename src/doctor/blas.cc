#include "doctor/blas.h"

#include <climits>
#include <cstdlib>

namespace hpct::doctor {

BlasFacts classify_blas(const std::string& real_path) {
  BlasFacts b;
  b.path = real_path;
  auto has = [&](const char* s) { return real_path.find(s) != std::string::npos; };
  if (real_path.empty()) {
    b.kind = "none";
  } else if (has("openblas")) {
    b.kind = "OpenBLAS";
  } else if (has("blis")) {
    b.kind = "BLIS";
  } else if (has("mkl")) {
    b.kind = "MKL";
  } else if (has("atlas")) {
    b.kind = "ATLAS";
  } else if (has("/blas/libblas.so") || has("netlib")) {
    // Debian's reference implementation lives in .../blas/ (package libblas3).
    b.kind = "reference";
  } else {
    b.kind = "unknown";
  }
  if (has("pthread")) b.variant = "pthread";
  else if (has("openmp")) b.variant = "openmp";
  else if (has("serial")) b.variant = "serial";
  return b;
}

BlasFacts find_blas() {
#if defined(__x86_64__)
  const char* triplet = "x86_64-linux-gnu";
#elif defined(__aarch64__)
  const char* triplet = "aarch64-linux-gnu";
#else
  const char* triplet = "";
#endif
  const std::string candidates[] = {std::string("/usr/lib/") + triplet + "/libblas.so.3",
                                    std::string("/lib/") + triplet + "/libblas.so.3",
                                    "/usr/lib64/libblas.so.3", "/usr/lib/libblas.so.3"};
  for (const auto& c : candidates) {
    char buf[PATH_MAX];
    if (::realpath(c.c_str(), buf) != nullptr) return classify_blas(buf);
  }
  return classify_blas("");
}

const char* optimized_blas_package() { return "libopenblas0-pthread"; }

}  // namespace hpct::doctor
