// Which BLAS libtorch will use on a host. torch from the package index
// carries its own inside libtorch_cpu (MKL on x86-64) and names no system
// BLAS: then the row says so ("built-in"). A libtorch that links
// libblas.so.3 (Debian's) gets the system's, which the alternatives system
// points at the reference BLAS (5-20x slower) unless an optimized one
// (OpenBLAS, BLIS, MKL) is installed.
#pragma once

#include <string>
#include <vector>

#include "doctor/facts.h"

namespace hpct::doctor {

// Kind and variant from the real path of libblas.so.3 (empty path: "none").
// Pure; thread-safe.
BlasFacts classify_blas(const std::string& real_path);

// The shared libraries an ELF file names (its DT_NEEDED entries), in order;
// empty when the file is missing or not a 64-bit ELF. Reads only the
// headers and the dynamic section.
std::vector<std::string> elf_needed(const std::string& path);

// True when one of these names is a BLAS (libblas, libopenblas, libmkl_rt,
// libcblas): libtorch then uses the system's.
bool names_system_blas(const std::vector<std::string>& needed);

// hpctrain's libtorch_cpu: torch/ beside this executable (the package's
// /usr/lib/hpctrain/torch), else the build's torch; "" when neither exists.
std::string hpctrain_libtorch();

// "built-in" (path: libtorch_cpu) when hpctrain's libtorch names no system
// BLAS; otherwise the BLAS this process has loaded, else libblas.so.3 where
// the dynamic linker would find it (the multiarch and lib64 directories),
// classified by its real path.
BlasFacts find_blas();

// The Debian package that replaces a reference BLAS: libopenblas0-pthread.
const char* optimized_blas_package();

}  // namespace hpct::doctor
