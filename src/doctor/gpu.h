// Doctor's GPU facts: the GPUs of a host as nvidia-smi lists them, the
// driver and the CUDA version it supports, the CUDA version torch was built
// for, and NCCL's version (the library that came with torch). A host with
// no GPU reports "no GPU", which is fine for CPU jobs. The parsers are
// separate from the probe so tests feed them captured nvidia-smi text.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace hpct::doctor {

struct GpuInfo {
  int index = 0;
  std::string name;              // "NVIDIA H200"
  std::uint64_t memory_mib = 0;  // memory.total
  std::string driver;            // driver_version
};

struct GpuFacts {
  std::vector<GpuInfo> gpus;
  std::string driver;        // the first GPU's driver version; "" without GPUs
  std::string cuda_driver;   // the newest CUDA the driver supports ("13.0", nvidia-smi's header)
  std::string cuda_torch;    // the CUDA torch was built for ("13.0"); "" for a CPU build
  std::string nccl;          // "2.30.7": torch's NCCL (its wheel, nvidia-nccl-cu13); "" when none
  std::string error;         // why no GPU was read ("nvidia-smi not found", its output)
};

// The nvidia-smi command doctor runs, and what parse_nvidia_smi_csv reads.
std::vector<std::string> nvidia_smi_query_argv();

// Lines of `nvidia-smi --query-gpu=index,name,memory.total,driver_version
// --format=csv,noheader,nounits`: "0, NVIDIA H200, 143771, 580.159.03".
// Lines that do not parse are skipped (an nvidia-smi error message then
// gives no GPU, and the caller reports its text).
std::vector<GpuInfo> parse_nvidia_smi_csv(const std::string& text);

// "13.0" from the "CUDA Version: 13.0" of nvidia-smi's plain output; "".
std::string parse_nvidia_smi_cuda_version(const std::string& text);

// "2.30.7" from a wheel's folder name "nvidia_nccl_cu13-2.30.7.dist-info"; "".
std::string nccl_version_from_dist_info(const std::string& folder_name);

// Runs nvidia-smi (each run bounded by 5 s; none installed: "no GPU") and
// looks for torch's NCCL in site_packages (empty: the one hpctrain was
// built against). Blocks for at most about 10 s.
GpuFacts find_gpus(const std::string& site_packages = "");

// One line for the report: "1x NVIDIA H200 (143771 MiB), driver 580.159.03,
// CUDA 13.0 (driver) / 13.0 (torch), NCCL 2.30.7", or "no GPU (...)".
std::string gpu_summary(const GpuFacts& g);

}  // namespace hpct::doctor
