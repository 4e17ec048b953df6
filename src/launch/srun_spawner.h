// SrunSpawner: the whole job as one Slurm step, `srun -n N --input=all
// --kill-on-bad-exit=1 hpctrain launch-rank`. Slurm places the ranks (inside
// an allocation: on its nodes; outside one srun makes one); each wrapper reads
// its rank and placement from SLURM_PROCID, SLURM_LOCALID, SLURM_NODEID.
// --input=all gives every wrapper the spec on stdin.
#pragma once

#include <string>
#include <vector>

#include "launch/spawner.h"

namespace hpct::launch {

struct SrunOptions {
  std::string srun = "srun";
  std::vector<std::string> extra_args;  // e.g. --overcommit, --partition=p
};

class SrunSpawner final : public Spawner {
 public:
  explicit SrunSpawner(SrunOptions options) : options_(std::move(options)) {}
  const char* name() const override { return "srun"; }
  std::vector<ProcessPlan> plan(const JobLayout& job) const override;

 private:
  SrunOptions options_;
};

}  // namespace hpct::launch
