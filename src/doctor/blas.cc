#include "doctor/blas.h"

#include <link.h>

#include <climits>
#include <cstdlib>
#include <string>

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

namespace {

// A BLAS this process already loaded (hpctrain links libtorch, which links
// libblas.so.3): what libtorch really uses here, after every alternative.
std::string loaded_blas() {
  std::string found;
  dl_iterate_phdr(
      [](dl_phdr_info* info, size_t, void* data) {
        std::string name = info->dlpi_name ? info->dlpi_name : "";
        auto slash = name.rfind('/');
        std::string base = slash == std::string::npos ? name : name.substr(slash + 1);
        if (base.rfind("libblas.so", 0) == 0 || base.rfind("libmkl_rt", 0) == 0) {
          *static_cast<std::string*>(data) = name;
          return 1;
        }
        return 0;
      },
      &found);
  if (found.empty()) return "";
  char buf[PATH_MAX];
  return ::realpath(found.c_str(), buf) ? std::string(buf) : found;
}

}  // namespace

BlasFacts find_blas() {
  std::string loaded = loaded_blas();
  if (!loaded.empty()) return classify_blas(loaded);
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
