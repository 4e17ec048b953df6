// Which MPI `mpirun --version` belongs to. Open MPI, MPICH (Hydra), Intel
// MPI and MVAPICH2 each print a different banner; a cluster mixing them
// fails at MPI_Init in ways that name neither, so doctor names them.
// Pure; thread-safe.
#pragma once

#include <string>

#include "doctor/facts.h"

namespace hpct::doctor {

// Fills implementation and version from the output of `mpirun --version`
// (stdout and stderr together). implementation "unknown" when no known
// banner is found; found and the paths are left to the caller.
void parse_mpirun_version(const std::string& output, MpiFacts& out);

// "Open MPI 4.1.4"
std::string mpi_label(const MpiFacts& m);

}  // namespace hpct::doctor
