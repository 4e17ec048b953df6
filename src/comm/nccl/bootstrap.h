// The parts of the NCCL backend's start-up that go through our store, kept
// free of NCCL and CUDA so that they are tested on the CPU.
//
// Protocol (NcclCommunicator::connect, every rank of one communicator, all
// keys under "nccl/<name>/" of the job's store):
//   1. Each rank publishes its device identity ("<host>/<PCI bus id>") under
//      "device/<rank>" and reads every other rank's (bounded by the timeout;
//      Timeout names the ranks that never published). Two ranks with one
//      identity share a GPU, which NCCL refuses: every rank raises
//      InvalidArgument naming them and the way out (the staged path), instead
//      of NCCL's "Duplicate GPU detected" deep inside its init.
//   2. Rank 0 calls ncclGetUniqueId and publishes the 128 bytes under
//      "unique_id"; the others wait for that key (bounded; Timeout names the
//      key and what to check) and check its length.
//   3. Every rank calls ncclCommInitRankConfig with that id (non-blocking;
//      NCCL's own bootstrap takes it from there).
// Keys are never deleted: use a fresh store namespace (PrefixStore) or a new
// name for each communicator, as for Gloo.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "core/clock.h"
#include "store/store.h"

namespace hpct::comm::nccl {

// "nccl/<name>/<what>".
std::string bootstrap_key(const std::string& name, const std::string& what);

// Step 1: every rank's identity, by rank. Blocks until all are there or
// raises Timeout naming the missing ranks.
std::vector<std::string> exchange_device_identities(store::Store& store, const std::string& name,
                                                    int rank, int size, const std::string& identity,
                                                    Millis timeout);

// "" when every identity differs; otherwise a sentence naming the first
// ranks that share one ("ranks 0 and 1 share GPU host/0000:1b:00.0").
std::string describe_shared_devices(const std::vector<std::string>& identities);

// Step 2, rank 0's half: id holds ncclGetUniqueId's bytes.
void publish_unique_id(store::Store& store, const std::string& name, const std::string& id);

// Step 2, the others' half: rank 0's id, of exactly id_bytes bytes. Timeout
// after `timeout` naming the key and the likely causes; Mismatch when the
// length differs (ranks built against different NCCLs).
std::string wait_unique_id(store::Store& store, const std::string& name, int rank, size_t id_bytes,
                           Millis timeout);

}  // namespace hpct::comm::nccl
