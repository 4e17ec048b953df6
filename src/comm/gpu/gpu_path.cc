#include "comm/gpu/gpu_path.h"

#include <algorithm>

#include "core/error.h"

namespace hpct::comm {
namespace {

std::string join_counts(const std::vector<int>& per_host) {
  std::string s;
  for (size_t h = 0; h < per_host.size(); ++h) {
    if (!s.empty()) s += ", ";
    s += "host " + std::to_string(h) + ": " + std::to_string(per_host[h]);
  }
  return s;
}

// "" when every rank has a GPU of its own; otherwise the first pair that
// shares one: "ranks 0 and 1 on GPU 0" (" of host 1" with several hosts).
std::string shared_gpu(const std::vector<RankPlacement>& ranks, const HostLayout& layout,
                       const std::vector<std::int64_t>& hosts) {
  for (size_t b = 1; b < ranks.size(); ++b) {
    for (size_t a = 0; a < b; ++a) {
      if (ranks[a].host != ranks[b].host || ranks[a].gpu != ranks[b].gpu) continue;
      std::string s = "ranks " + std::to_string(a) + " and " + std::to_string(b) + " on GPU " +
                      std::to_string(ranks[a].device);
      if (layout.host_count > 1)
        s += " of host " + std::to_string(host_layout(hosts, static_cast<int>(a)).host_index);
      return s;
    }
  }
  return "";
}

}  // namespace

GpuPath parse_gpu_path(const std::string& setting) {
  if (setting == "auto") return GpuPath::kAuto;
  if (setting == "nccl") return GpuPath::kNccl;
  if (setting == "hierarchical") return GpuPath::kHierarchical;
  if (setting == "staged") return GpuPath::kStaged;
  throw_invalid_argument("HPCT_GPU_PATH=" + setting +
                         " is not one of auto, nccl, hierarchical, staged");
}

const char* gpu_path_name(GpuPath path) {
  switch (path) {
    case GpuPath::kAuto:
      return "auto";
    case GpuPath::kNccl:
      return "nccl";
    case GpuPath::kHierarchical:
      return "hierarchical";
    case GpuPath::kStaged:
      return "staged";
  }
  return "?";
}

HostLayout host_layout(const std::vector<std::int64_t>& hosts, int rank) {
  HostLayout l;
  std::vector<std::int64_t> seen;  // host identities, in order of first appearance
  std::vector<int> host_of(hosts.size());
  for (size_t r = 0; r < hosts.size(); ++r) {
    auto it = std::find(seen.begin(), seen.end(), hosts[r]);
    if (it == seen.end()) {
      seen.push_back(hosts[r]);
      l.ranks_per_host.push_back(0);
      it = seen.end() - 1;
    }
    const int h = static_cast<int>(it - seen.begin());
    host_of[r] = h;
    if (static_cast<int>(r) == rank) {
      l.host_index = h;
      l.local_rank = l.ranks_per_host[static_cast<size_t>(h)];
    }
    ++l.ranks_per_host[static_cast<size_t>(h)];
  }
  l.host_count = static_cast<int>(seen.size());
  l.uniform = l.host_count > 0 && std::all_of(l.ranks_per_host.begin(), l.ranks_per_host.end(),
                                              [&](int n) { return n == l.ranks_per_host[0]; });
  if (rank < 0 || static_cast<size_t>(rank) >= hosts.size()) return l;
  std::vector<int> next_local(seen.size(), 0);
  for (size_t r = 0; r < hosts.size(); ++r) {
    const int h = host_of[r];
    const int local = next_local[static_cast<size_t>(h)]++;
    if (h == l.host_index) l.local_world_ranks.push_back(static_cast<int>(r));
    if (l.uniform && local == l.local_rank) l.across_world_ranks.push_back(static_cast<int>(r));
  }
  // across_world_ranks was filled in rank order; hosts are numbered by their
  // first rank, and local rank l of host h comes after local rank l of any
  // host numbered before it only when ranks are grouped by host. Put it in
  // host order.
  if (l.uniform) {
    std::sort(l.across_world_ranks.begin(), l.across_world_ranks.end(), [&](int a, int b) {
      return host_of[static_cast<size_t>(a)] < host_of[static_cast<size_t>(b)];
    });
  }
  return l;
}

GpuPathChoice choose_gpu_path(const GpuPathInputs& in) {
  std::vector<std::int64_t> hosts;
  for (const auto& p : in.ranks) hosts.push_back(p.host);
  const HostLayout layout = host_layout(hosts, 0);
  const std::string shared = shared_gpu(in.ranks, layout, hosts);
  const int size = static_cast<int>(in.ranks.size());
  const bool several_hosts = layout.host_count > 1;
  const int local_size = layout.ranks_per_host.empty() ? 0 : layout.ranks_per_host[0];
  const std::string setting = std::string("HPCT_GPU_PATH=") + gpu_path_name(in.requested);

  // What NCCL needs, for both paths that use it.
  auto need_nccl = [&] {
    if (!shared.empty()) {
      throw_invalid_argument("NCCL refuses two ranks on one GPU (" + shared +
                             "); use HPCT_GPU_PATH=staged or auto");
    }
    if (!in.nccl_built) {
      throw_invalid_argument(
          setting +
          ", but this build of hpctrain has no NCCL backend (torch's "
          "wheel had no NCCL when it was configured); use HPCT_GPU_PATH=staged or auto");
    }
    if (!in.have_store) {
      throw_invalid_argument(
          setting +
          " needs the job's rendezvous store for NCCL's start-up and "
          "this rank has none (MPI started it without hpctrain launch): start the "
          "job with hpctrain launch (also with --spawner mpirun), or use "
          "HPCT_GPU_PATH=staged or auto");
    }
  };

  switch (in.requested) {
    case GpuPath::kStaged:
      return {GpuPath::kStaged, "HPCT_GPU_PATH=staged"};
    case GpuPath::kNccl:
      need_nccl();
      return {GpuPath::kNccl, "HPCT_GPU_PATH=nccl"};
    case GpuPath::kHierarchical:
      need_nccl();
      if (!several_hosts) {
        throw_invalid_argument("HPCT_GPU_PATH=hierarchical needs ranks on several hosts, and all " +
                               std::to_string(size) +
                               " are on one; use HPCT_GPU_PATH=nccl or auto");
      }
      if (!layout.uniform) {
        throw_invalid_argument(
            "HPCT_GPU_PATH=hierarchical needs the same number of ranks on every "
            "host, and they differ (" +
            join_counts(layout.ranks_per_host) +
            "); start as many on each, or use HPCT_GPU_PATH=nccl or auto");
      }
      return {GpuPath::kHierarchical,
              "HPCT_GPU_PATH=hierarchical: " + std::to_string(layout.host_count) + " hosts x " +
                  std::to_string(local_size) + " ranks"};
    case GpuPath::kAuto:
      break;
  }
  if (!shared.empty()) {
    return {GpuPath::kStaged, "NCCL refuses two ranks on one GPU (" + shared + ")"};
  }
  if (!in.nccl_built) return {GpuPath::kStaged, "this build has no NCCL backend"};
  if (!in.have_store) {
    return {GpuPath::kStaged,
            "no rendezvous store for NCCL's start-up (MPI started the job "
            "without hpctrain launch)"};
  }
  if (several_hosts && layout.uniform && local_size >= 2) {
    return {GpuPath::kHierarchical,
            std::to_string(layout.host_count) + " hosts x " + std::to_string(local_size) +
                " ranks: NCCL inside each host, the host communicator across"};
  }
  if (!several_hosts) return {GpuPath::kNccl, "one host, one GPU per rank"};
  if (!layout.uniform) {
    return {GpuPath::kNccl, "hosts have different numbers of ranks (" +
                                join_counts(layout.ranks_per_host) + "): NCCL across hosts"};
  }
  return {GpuPath::kNccl, "one rank per host: NCCL across hosts"};
}

}  // namespace hpct::comm
