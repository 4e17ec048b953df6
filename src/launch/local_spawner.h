// LocalSpawner: every rank as a child of the launcher on this host.
#pragma once

#include "launch/spawner.h"

namespace hpct::launch {

class LocalSpawner final : public Spawner {
 public:
  const char* name() const override { return "local"; }
  // InvalidArgument naming the first rank whose host is not this machine.
  std::vector<ProcessPlan> plan(const JobLayout& job) const override;
};

}  // namespace hpct::launch
