#include "launch/local_spawner.h"

#include "core/error.h"

namespace hpct::launch {

std::vector<ProcessPlan> LocalSpawner::plan(const JobLayout& job) const {
  std::vector<ProcessPlan> out;
  for (const auto& r : job.ranks) {
    if (!job.rank_is_local.at(static_cast<size_t>(r.rank))) {
      throw_invalid_argument("--spawner local runs ranks on this machine only, but rank " +
                             std::to_string(r.rank) + " is placed on host " + r.host +
                             "; use --spawner ssh (or mpirun/srun)");
    }
    ProcessPlan p;
  p.via = "local";
    p.argv = wrapper_command(job);
    p.host = r.host;
    p.ranks = {r.rank};
    out.push_back(std::move(p));
  }
  return out;
}

}  // namespace hpct::launch
