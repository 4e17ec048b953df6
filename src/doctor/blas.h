// Which BLAS libtorch will use on a host. Debian's libtorch links
// libblas.so.3, which the alternatives system points at the reference BLAS
// (5-20x slower) unless an optimized one (OpenBLAS, BLIS, MKL) is installed.
#pragma once

#include <string>

#include "doctor/facts.h"

namespace hpct::doctor {

// Kind and variant from the real path of libblas.so.3 (empty path: "none").
// Pure; thread-safe.
BlasFacts classify_blas(const std::string& real_path);

// The BLAS this process has loaded (through libtorch), else libblas.so.3
// where the dynamic linker would find it (the multiarch and lib64
// directories), classified by its real path.
BlasFacts find_blas();

// The Debian package that replaces a reference BLAS: libopenblas0-pthread.
const char* optimized_blas_package();

}  // namespace hpct::doctor
