// Who am I in the job: rank, size and local rank, from whichever launcher
// started this process.
//
// Sources, first match wins: hpctrain launch (HPCT_RANK, HPCT_SIZE, ...),
// OpenMPI's mpirun (OMPI_COMM_WORLD_*), MPICH/Hydra and PMIx (PMI_RANK,
// PMI_SIZE, PMIX_RANK), Slurm's srun (SLURM_PROCID, SLURM_NTASKS, ...), a
// Kubernetes Indexed Job (JOB_COMPLETION_INDEX as the rank, one per pod, with
// HPCT_SIZE from the manifest: the pod's environment does not hold the Job's
// size). With none of them, a single rank.
#pragma once

#include <string>

#include "core/env.h"

namespace hpct {

enum class Launcher { kNone, kHpctrain, kOpenMpi, kPmi, kSlurm, kKubernetes };

const char* launcher_name(Launcher l);

struct WorldInfo {
  int rank = 0;
  int size = 1;
  int local_rank = 0;
  int local_size = 1;
  int cross_rank = 0;  // index of this host among the job's hosts
  int cross_size = 1;
  int restart = 0;     // how many times hpctrain launch restarted the job
  Launcher launcher = Launcher::kNone;
  // True when an MPI runtime (mpirun, mpiexec, srun with PMI) started us, so
  // MPI_Init will find its peers.
  bool mpi_runtime = false;
};

// Malformed or inconsistent values (rank >= size, non-numbers) raise
// InvalidArgument naming the variable.
WorldInfo discover_world(const Env& env);

}  // namespace hpct
