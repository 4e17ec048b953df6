// The backend libraries' own allreduce, for comparison with ours in
// `hpctrain bench comm`.
#pragma once

#include <memory>

#include "bench/comm_bench.h"

namespace hpct::bench {

// MPI_Allreduce on MPI_COMM_WORLD for an MpiCommunicator, gloo::allreduce
// with Gloo's own sum on the same Gloo context for a GlooCommunicator; null
// for anything else.
std::unique_ptr<RawAllreduce> make_raw_allreduce(comm::Communicator& comm);

}  // namespace hpct::bench
