// MpirunSpawner: the whole job as one mpirun (OpenMPI) or mpiexec (MPICH
// Hydra) command over the same hosts and slots, so MPI ranks find each
// other through the MPI runtime while hpctrain keeps supervision and output.
//
// OpenMPI: `mpirun -np N --host a:2,b:2 --map-by slot --bind-to none
// --stdin none`; remote daemons are started with ssh using the same
// -p/-i/-o options; --allow-run-as-root only when we are root. MPICH:
// `mpiexec -n N -hosts a:2,b:2`. Neither can hand the spec to every rank on
// stdin (Hydra forwards stdin to rank 0 only; Open MPI 4.1's `--stdin all`
// delivers nothing, measured here), so the spec goes in a 0600 file in the
// job's 0700 private directory on the shared file system, removed as soon
// as every rank has started. Teardown comes from mpirun itself: it signals
// every wrapper when it is signalled or dies, and when one rank fails.
#pragma once

#include <string>
#include <vector>

#include "launch/spawner.h"
#include "launch/ssh_spawner.h"

namespace hpct::launch {

enum class MpiFlavor { kOpenMpi, kMpich };

struct MpirunOptions {
  std::string mpirun = "mpirun";
  MpiFlavor flavor = MpiFlavor::kOpenMpi;
  bool is_root = false;                 // OpenMPI refuses root without --allow-run-as-root
  SshOptions ssh;                       // for remote daemons (OpenMPI's plm_rsh_args)
  bool ssh_options_given = false;       // pass them on only when the user set -p/-i/-o
  std::string network_interface;        // restrict MPI's TCP traffic to it
  std::vector<std::string> extra_args;  // appended before the wrapper
};

class MpirunSpawner final : public Spawner {
 public:
  explicit MpirunSpawner(MpirunOptions options) : options_(std::move(options)) {}
  const char* name() const override { return "mpirun"; }
  std::vector<ProcessPlan> plan(const JobLayout& job) const override;

 private:
  MpirunOptions options_;
};

// Runs `mpirun --version` (bounded to 10 s) and tells OpenMPI from MPICH.
// Io when mpirun cannot be run; InvalidArgument for an unknown MPI.
MpiFlavor detect_mpi_flavor(const std::string& mpirun);

}  // namespace hpct::launch
