#include "launch/srun_spawner.h"

namespace hpct::launch {

std::vector<ProcessPlan> SrunSpawner::plan(const JobLayout& job) const {
  ProcessPlan p;
  p.via = "srun";
  p.host = "srun";
  p.group = true;
  for (const auto& r : job.ranks) p.ranks.push_back(r.rank);
  p.argv = {options_.srun, "-n", std::to_string(job.ranks.size()), "--input=all",
            "--kill-on-bad-exit=1"};
  p.argv.insert(p.argv.end(), options_.extra_args.begin(), options_.extra_args.end());
  for (const auto& w : wrapper_command(job)) p.argv.push_back(w);
  return {p};
}

}  // namespace hpct::launch
