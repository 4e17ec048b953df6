#include "doctor/gpu.h"

#include <filesystem>
#include <sstream>

#include "doctor/capture.h"

namespace hpct::doctor {
namespace {

std::string trim(const std::string& s) {
  const auto b = s.find_first_not_of(" \t\r");
  if (b == std::string::npos) return "";
  return s.substr(b, s.find_last_not_of(" \t\r") - b + 1);
}

std::vector<std::string> split_csv(const std::string& line) {
  std::vector<std::string> out;
  std::stringstream ss(line);
  std::string field;
  while (std::getline(ss, field, ',')) out.push_back(trim(field));
  return out;
}

bool all_digits(const std::string& s) {
  return !s.empty() && s.find_first_not_of("0123456789") == std::string::npos;
}

}  // namespace

std::vector<std::string> nvidia_smi_query_argv() {
  return {"nvidia-smi", "--query-gpu=index,name,memory.total,driver_version", "--format=csv,noheader,nounits"};
}

std::vector<GpuInfo> parse_nvidia_smi_csv(const std::string& text) {
  std::vector<GpuInfo> out;
  std::stringstream ss(text);
  std::string line;
  while (std::getline(ss, line)) {
    const auto f = split_csv(line);
    if (f.size() != 4 || !all_digits(f[0]) || !all_digits(f[2]) || f[1].empty() || f[3].empty()) continue;
    GpuInfo g;
    g.index = std::stoi(f[0]);
    g.name = f[1];
    g.memory_mib = std::stoull(f[2]);
    g.driver = f[3];
    out.push_back(g);
  }
  return out;
}

std::string parse_nvidia_smi_cuda_version(const std::string& text) {
  const std::string key = "CUDA Version:";
  const auto at = text.find(key);
  if (at == std::string::npos) return "";
  std::string v = trim(text.substr(at + key.size(), 16));
  const auto end = v.find_first_not_of("0123456789.");
  return end == std::string::npos ? v : v.substr(0, end);
}

std::string nccl_version_from_dist_info(const std::string& folder_name) {
  const std::string prefix = "nvidia_nccl_cu";
  const std::string suffix = ".dist-info";
  if (folder_name.rfind(prefix, 0) != 0 || folder_name.size() <= suffix.size() ||
      folder_name.compare(folder_name.size() - suffix.size(), suffix.size(), suffix) != 0) {
    return "";
  }
  const auto dash = folder_name.find('-');
  if (dash == std::string::npos) return "";
  return folder_name.substr(dash + 1, folder_name.size() - suffix.size() - dash - 1);
}

GpuFacts find_gpus(const std::string& site_packages) {
  GpuFacts g;
#ifdef HPCT_TORCH_CUDA_VERSION
  g.cuda_torch = HPCT_TORCH_CUDA_VERSION;
#endif
  std::string sp = site_packages;
#ifdef HPCT_TORCH_LIB_DIR
  if (sp.empty()) sp = std::string(HPCT_TORCH_LIB_DIR) + "/../..";
#endif
  std::error_code ec;
  if (!sp.empty() && std::filesystem::is_directory(sp, ec)) {
    for (const auto& e : std::filesystem::directory_iterator(sp, ec)) {
      const std::string v = nccl_version_from_dist_info(e.path().filename().string());
      if (!v.empty()) g.nccl = v;
    }
  }
  const Captured q = capture_command(nvidia_smi_query_argv(), Millis(5000));
  if (!q.finished || q.exit_code != 0) {
    g.error = !q.finished && q.out.empty() ? "nvidia-smi not found or did not answer within 5 s" : trim(q.out);
    if (g.error.size() > 200) g.error = g.error.substr(0, 200);
    if (g.error.empty()) g.error = "nvidia-smi exited with " + std::to_string(q.exit_code);
    return g;
  }
  g.gpus = parse_nvidia_smi_csv(q.out);
  if (g.gpus.empty()) {
    g.error = "nvidia-smi listed no GPU";
    return g;
  }
  g.driver = g.gpus.front().driver;
  const Captured plain = capture_command({"nvidia-smi"}, Millis(5000));
  if (plain.finished) g.cuda_driver = parse_nvidia_smi_cuda_version(plain.out);
  return g;
}

std::string gpu_summary(const GpuFacts& g) {
  if (g.gpus.empty()) return "no GPU (" + (g.error.empty() ? std::string("none listed") : g.error) + ")";
  std::string s = std::to_string(g.gpus.size()) + "x " + g.gpus.front().name + " (" +
                  std::to_string(g.gpus.front().memory_mib) + " MiB), driver " + g.driver + ", CUDA " +
                  (g.cuda_driver.empty() ? "?" : g.cuda_driver) + " (driver) / " +
                  (g.cuda_torch.empty() ? "none" : g.cuda_torch) + " (torch), NCCL " +
                  (g.nccl.empty() ? "not found beside torch" : g.nccl);
  for (const auto& x : g.gpus) {
    if (x.name != g.gpus.front().name) {
      s += "; mixed models (GPU " + std::to_string(x.index) + ": " + x.name + ")";
      break;
    }
  }
  return s;
}

}  // namespace hpct::doctor
