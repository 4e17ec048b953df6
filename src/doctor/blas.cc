#include "doctor/blas.h"

#include <elf.h>
#include <fcntl.h>
#include <link.h>
#include <unistd.h>

#include <climits>
#include <cstdlib>
#include <string>

#include "core/fd.h"

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

std::vector<std::string> elf_needed(const std::string& path) {
  std::vector<std::string> out;
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd.valid()) return out;
  auto read_at = [&](void* buf, size_t n, off_t at) { return ::pread(fd.get(), buf, n, at) == static_cast<ssize_t>(n); };
  Elf64_Ehdr eh;
  if (!read_at(&eh, sizeof eh, 0) || std::string(reinterpret_cast<const char*>(eh.e_ident), 4) != "\x7f" "ELF" ||
      eh.e_ident[EI_CLASS] != ELFCLASS64 || eh.e_shentsize != sizeof(Elf64_Shdr) || eh.e_shnum == 0) {
    return out;
  }
  std::vector<Elf64_Shdr> sh(eh.e_shnum);
  if (!read_at(sh.data(), sh.size() * sizeof(Elf64_Shdr), static_cast<off_t>(eh.e_shoff))) return out;
  for (const auto& s : sh) {
    if (s.sh_type != SHT_DYNAMIC || s.sh_link >= sh.size() || s.sh_entsize != sizeof(Elf64_Dyn)) continue;
    const Elf64_Shdr& strtab = sh[s.sh_link];
    std::vector<Elf64_Dyn> dyn(s.sh_size / sizeof(Elf64_Dyn));
    std::string strs(strtab.sh_size, '\0');
    if (!read_at(dyn.data(), dyn.size() * sizeof(Elf64_Dyn), static_cast<off_t>(s.sh_offset)) ||
        !read_at(strs.data(), strs.size(), static_cast<off_t>(strtab.sh_offset))) {
      return out;
    }
    for (const auto& d : dyn) {
      if (d.d_tag == DT_NULL) break;
      if (d.d_tag == DT_NEEDED && d.d_un.d_val < strs.size()) out.emplace_back(strs.c_str() + d.d_un.d_val);
    }
  }
  return out;
}

bool names_system_blas(const std::vector<std::string>& needed) {
  for (const auto& n : needed) {
    for (const char* blas : {"libblas.so", "libopenblas", "libmkl_rt", "libcblas"}) {
      if (n.rfind(blas, 0) == 0) return true;
    }
  }
  return false;
}

std::string hpctrain_libtorch() {
  char exe[PATH_MAX];
  ssize_t n = ::readlink("/proc/self/exe", exe, sizeof exe - 1);
  if (n > 0) {
    std::string dir(exe, static_cast<size_t>(n));
    dir = dir.substr(0, dir.rfind('/'));
    std::string beside = dir + "/torch/libtorch_cpu.so";
    if (::access(beside.c_str(), R_OK) == 0) return beside;
  }
#ifdef HPCT_TORCH_LIB_DIR
  std::string built = std::string(HPCT_TORCH_LIB_DIR) + "/libtorch_cpu.so";
  if (::access(built.c_str(), R_OK) == 0) return built;
#endif
  return "";
}

BlasFacts find_blas() {
  const std::string torch = hpctrain_libtorch();
  if (!torch.empty() && !names_system_blas(elf_needed(torch))) {
    BlasFacts b;
    b.kind = "built-in";
    b.path = torch;
    return b;
  }
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
