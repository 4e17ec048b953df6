#include "doctor/facts.h"

#include "core/error.h"

namespace hpct::doctor {
namespace {

template <typename T>
void take(const nlohmann::json& j, const char* key, T& out) {
  auto it = j.find(key);
  if (it != j.end() && !it->is_null()) out = it->get<T>();
}

nlohmann::json gpu_json(const GpuFacts& g) {
  nlohmann::json gpus = nlohmann::json::array();
  for (const auto& x : g.gpus) {
    gpus.push_back({{"index", x.index}, {"name", x.name}, {"memory_mib", x.memory_mib}, {"driver", x.driver}});
  }
  return {{"gpus", gpus},           {"driver", g.driver}, {"cuda_driver", g.cuda_driver},
          {"cuda_torch", g.cuda_torch}, {"nccl", g.nccl},     {"error", g.error}};
}

}  // namespace

nlohmann::json to_json(const HostFacts& f) {
  return {{"version", f.version},
          {"git", f.git},
          {"exe", f.exe},
          {"build_sha256", f.build_sha256},
          {"user", f.user},
          {"uid", f.uid},
          {"gid", f.gid},
          {"packages", f.packages},
          {"hostname", f.hostname},
          {"hostname_addrs", f.hostname_addrs},
          {"listed_addrs", f.listed_addrs},
          {"loopback_hosts_line", f.loopback_hosts_line},
          {"interface_addrs", f.interface_addrs},
          {"cores", f.cores},
          {"mem_total", f.mem_total},
          {"mem_available", f.mem_available},
          {"disk_path", f.disk_path},
          {"disk_free", f.disk_free},
          {"time_ns", f.time_ns},
          {"mpi",
           {{"found", f.mpi.found},
            {"implementation", f.mpi.implementation},
            {"version", f.mpi.version},
            {"path", f.mpi.path},
            {"resolved", f.mpi.resolved},
            {"error", f.mpi.error}}},
          {"blas", {{"path", f.blas.path}, {"kind", f.blas.kind}, {"variant", f.blas.variant}}},
          {"gpu", gpu_json(f.gpu)},
          {"shared_dir", f.shared_dir},
          {"token_written", f.token_written},
          {"token_error", f.token_error},
          {"ports", f.ports},
          {"port_errors", f.port_errors}};
}

HostFacts host_facts_from_json(const nlohmann::json& j) {
  if (!j.is_object()) throw_data_corrupt("doctor probe: facts are not a JSON object: " + j.dump());
  HostFacts f;
  try {
    take(j, "version", f.version);
    take(j, "git", f.git);
    take(j, "exe", f.exe);
    take(j, "build_sha256", f.build_sha256);
    take(j, "user", f.user);
    take(j, "uid", f.uid);
    take(j, "gid", f.gid);
    take(j, "packages", f.packages);
    take(j, "hostname", f.hostname);
    take(j, "hostname_addrs", f.hostname_addrs);
    take(j, "listed_addrs", f.listed_addrs);
    take(j, "loopback_hosts_line", f.loopback_hosts_line);
    take(j, "interface_addrs", f.interface_addrs);
    take(j, "cores", f.cores);
    take(j, "mem_total", f.mem_total);
    take(j, "mem_available", f.mem_available);
    take(j, "disk_path", f.disk_path);
    take(j, "disk_free", f.disk_free);
    take(j, "time_ns", f.time_ns);
    if (j.contains("mpi")) {
      const auto& m = j["mpi"];
      take(m, "found", f.mpi.found);
      take(m, "implementation", f.mpi.implementation);
      take(m, "version", f.mpi.version);
      take(m, "path", f.mpi.path);
      take(m, "resolved", f.mpi.resolved);
      take(m, "error", f.mpi.error);
    }
    if (j.contains("blas")) {
      const auto& b = j["blas"];
      take(b, "path", f.blas.path);
      take(b, "kind", f.blas.kind);
      take(b, "variant", f.blas.variant);
    }
    if (j.contains("gpu")) {
      const auto& g = j["gpu"];
      take(g, "driver", f.gpu.driver);
      take(g, "cuda_driver", f.gpu.cuda_driver);
      take(g, "cuda_torch", f.gpu.cuda_torch);
      take(g, "nccl", f.gpu.nccl);
      take(g, "error", f.gpu.error);
      if (g.contains("gpus")) {
        for (const auto& x : g["gpus"]) {
          GpuInfo i;
          take(x, "index", i.index);
          take(x, "name", i.name);
          take(x, "memory_mib", i.memory_mib);
          take(x, "driver", i.driver);
          f.gpu.gpus.push_back(i);
        }
      }
    }
    take(j, "shared_dir", f.shared_dir);
    take(j, "token_written", f.token_written);
    take(j, "token_error", f.token_error);
    take(j, "ports", f.ports);
    take(j, "port_errors", f.port_errors);
  } catch (const nlohmann::json::exception& e) {
    throw_data_corrupt(std::string("doctor probe: malformed facts: ") + e.what());
  }
  return f;
}

}  // namespace hpct::doctor
