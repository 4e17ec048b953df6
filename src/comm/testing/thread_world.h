// Ranks as threads of one test process: each thread gets its own
// GlooCommunicator over real loopback TCP, all meeting through one
// MemoryStore. For tests of anything that sits on a Communicator (tensor
// wrappers, the engine, the torch glue).
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "comm/gloo/communicator.h"
#include "store/store.h"

namespace hpct::comm::testing {

// A fresh store for one world, under the running GoogleTest's name.
std::shared_ptr<store::Store> test_store();

// Options for rank `rank` of `size`, with a quiet logger.
GlooOptions gloo_options_for(int rank, int size, std::shared_ptr<store::Store> store,
                             Millis timeout);

// Runs fn on every rank of a world of `size` threads and joins them; rethrows
// the lowest failing rank's exception. Bounded by `timeout` per operation.
// shm: the ranks allreduce through shared memory (GlooOptions::shm) instead
// of Gloo's ring.
void run_gloo_world(int size, Millis timeout, const std::function<void(GlooCommunicator&)>& fn,
                    bool shm = false);

}  // namespace hpct::comm::testing
