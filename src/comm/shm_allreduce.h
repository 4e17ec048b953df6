// Allreduce through shared memory, for a job whose ranks all run on one host.
//
// Why: on one host, MPI's shared-memory transport copies a large allreduce
// through its own fragments several times; here every rank maps one segment
// and the ranks reduce it in place between them. Measured on a 2-core VM, 2
// ranks, float32 sum: 80 MB in 8-13 ms here vs 40-43 ms for MPI_Allreduce,
// 1 MiB in 0.05 ms vs 0.13 ms (docs/comm.md). The MPI backend uses it for
// every allreduce when every rank is on this host (HPCT_SHM), the engine's
// negotiation bytes included: they run on the caller's thread, no handoff.
//
// Segment: a POSIX shared-memory object that rank 0 creates (create()) and
// the others open by name (open()); rank 0 unlinks the name once every rank
// has it mapped, so nothing is left in /dev/shm when the job ends, however it
// ends. Layout: a header page (magic, size, slot bytes, then one 128-byte
// arrival counter per rank) and one slot per rank. Space is reserved at
// create() (posix_fallocate), so a small /dev/shm fails there with a named
// error instead of a SIGBUS later.
//
// Algorithm (reduce-scatter + allgather through the slots): a buffer of up
// to half a slot goes whole, a larger one in equal pieces of at most a
// quarter slot; the two halves of each slot alternate between
// consecutive pieces. For each piece, rank r owns chunk r (a 1/size share,
// 64-byte aligned):
//   1. it copies every chunk but its own into its slot half, and arrives;
//   2. when all have arrived, it reduces chunk r over the ranks in rank order
//      (its own input and the others' slots) into its slot half, in blocks
//      that stay in L1 (kAvg divides right there), copies each block to its
//      output (two float32 ranks summing or averaging store both in one
//      pass), and arrives;
//   3. when all have arrived, it copies every other chunk q from rank q's
//      slot half into its output.
// Step 1 of piece k+2 reuses the half of piece k only after every rank
// arrived at step 2 of piece k+1, that is after every rank finished step 3 of
// piece k, so two arrivals per piece suffice. Every rank ends with the bits
// that chunk's owner computed: results are identical on every rank. The
// result is the same sum as reduce_elements() over ranks 0, 1, ... in order.
//
// Waiting: an arrival is a store of the rank's counter (and of the CPU it
// ran on); a waiter spins with pause for up to 50 us (ranks in one allreduce
// are usually in step) while the rank it waits for was last on another CPU,
// and otherwise sleeps on a futex on that counter, which the arriving rank
// wakes: a rank that waits for a slower one holds no core (the core is free
// for the peer and for the data loader's idle-priority decode threads) and
// still wakes within microseconds of the arrival. It never calls
// sched_yield: on this kernel's EEVDF scheduler a yield hands the core to a
// busy neighbour for a whole slice (milliseconds), once per wait, which made
// 16 MiB take 0.8-1.5x MPI_Allreduce's time on a loaded machine (2026-11-26,
// docs/comm.md). Every wait is bounded by the caller's deadline (Timeout
// naming the rank and the step it waited for) and checks every 50 ms that
// the ranks it waits for are alive (PeerFailure naming the rank and its pid).
//
// Threads: one operation at a time per object, in the same order on every
// rank (a Communicator's rule). Any thread may run it.
#pragma once

#include <sched.h>
#include <sys/types.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "comm/slot_stores.h"
#include "comm/types.h"
#include "core/clock.h"

namespace hpct::comm {

class ShmAllreduce {
 public:
  // Rank 0: creates and maps a new segment for `size` ranks with slots of
  // `slot_bytes` (rounded up to a multiple of 8 KiB); its name is name().
  // Io naming /dev/shm and the fix when the space cannot be reserved.
  static std::unique_ptr<ShmAllreduce> create(int size, std::size_t slot_bytes);
  // Ranks 1..size-1: maps the segment that rank 0 created. Mismatch when it
  // was made for another size or slot; Io when it cannot be opened.
  static std::unique_ptr<ShmAllreduce> open(const std::string& name, int rank, int size,
                                            std::size_t slot_bytes);
  ~ShmAllreduce();
  ShmAllreduce(const ShmAllreduce&) = delete;
  ShmAllreduce& operator=(const ShmAllreduce&) = delete;

  const std::string& name() const { return name_; }
  // Removes the name from /dev/shm (rank 0, once every rank has opened it);
  // the mappings stay. Idempotent.
  void unlink();
  // The process of each rank, for the liveness checks. A pid this process
  // cannot see (another pid namespace) is not checked; the deadline still is.
  void set_pids(const std::vector<pid_t>& pids);

  // out = the reduction of every rank's in (in == nullptr or in == out: in
  // place). Same count, dtype and op on every rank (the caller's contract).
  // Timeout when a rank does not arrive by the deadline, PeerFailure when
  // one's process is gone. Either leaves the segment unusable.
  void allreduce(const void* in, void* out, std::size_t count, DataType dtype, ReduceOp op,
                 const Deadline& deadline);
  // The same, in place over the concatenation of segments: they are read into
  // and written from the slots directly (no packed copy).
  void allreduce(const std::vector<BufferSegment>& segments, DataType dtype, ReduceOp op,
                 const Deadline& deadline);

  // After a failure: the lowest rank whose process is gone, or -1.
  int gone_rank() const;

  // Two ranks only, called by both at the same point: times kProbeRounds
  // round trips of a cache line between their CPUs. Returns nanoseconds
  // per round trip, or -1 when the peer did not take part within 50 us
  // (descheduled, or not here). The allreduce calls it every 64 pieces,
  // from the first, and streams its slot stores while the line crosses
  // slowly (comm/slot_stores.h).
  double probe_round_trip();

  int rank() const { return rank_; }
  int size() const { return size_; }
  std::size_t slot_bytes() const { return slot_bytes_; }

 private:
  ShmAllreduce(std::string name, int rank, int size, std::size_t slot_bytes, void* base,
               std::size_t mapped, bool owner);
  static std::size_t header_bytes(int size);
  std::uint8_t* slot_half(int rank, std::uint64_t piece) const;
  // Publishes this rank's arrival number `generation` and waits until every
  // rank has reached it. `what` names the step in errors.
  void arrive_and_wait(std::uint64_t generation, const Deadline& deadline, const char* what,
                       std::size_t count, DataType dtype);
  // Found on the CPU of the rank it waits for: the calling thread pins
  // itself to its home CPU (local rank r: the r-th CPU it may run on, when
  // there are at least as many as ranks) until the operation ends
  // (end_operation). Returns the CPU it now runs on.
  int go_home(int my_cpu);
  // Gives a thread pinned by go_home its own CPU mask back.
  void end_operation();
  // Throws PeerFailure if rank q's process is gone.
  void check_alive(int q, const char* what) const;
  // The algorithm, over where the elements live (shm_allreduce.cc).
  template <typename Io>
  void run(Io& io, std::size_t count, DataType dtype, ReduceOp op, const Deadline& deadline);
  template <typename Io>
  void reduce_chunk(Io& io, std::size_t base, std::size_t lo, std::size_t hi, std::uint64_t piece,
                    DataType dtype, ReduceOp op, bool stream);

  std::string name_;
  int rank_;
  int size_;
  std::size_t slot_bytes_;
  void* base_;
  std::size_t mapped_;
  bool linked_;              // rank 0 still has to unlink the name
  // HPCT_SHM_STREAM: -1 choose, 0 plain, 1 non-temporal. Here, in the
  // padding after linked_: with it after stores_ instead (8 bytes more),
  // the engine's 80 MB average took 8.0-8.7 ms instead of 6.9-7.2, for a
  // cause not found (2026-11-27, docs/comm.md).
  int stream_setting_;
  std::vector<pid_t> pids_;  // 0: not checked
  std::uint64_t generation_ = 0;
  std::uint64_t pieces_ = 0;           // pieces done, across operations (slot half alternation)
  bool pinned_ = false;
  cpu_set_t mask_;  // the thread's own, while pinned_
  std::vector<std::uint8_t> scratch_;  // a block of own input that spans segments
  // A piece of `bytes` stored plainly took `work`, its waits left out.
  void note_piece_work(std::chrono::steady_clock::duration work, std::size_t bytes);
  // Stores into the slots: plain, or non-temporal while plain ones are slow.
  SlotStoreChoice stores_;
  std::uint64_t probes_ = 0;  // round-trip probes done (their values on the probe lines)
};

// Sets up a ShmAllreduce over comm's own collectives (both backends call it
// once their connections are up). A collective: every
// rank calls it, before the result serves any allreduce. The ranks count as
// one host when they share the kernel boot, the network namespace and the
// host name (hosts made from network namespaces on one kernel do not).
// Returns null, with the reason in *off_reason, when they do not or when a
// rank cannot map the segment; every rank then gets null.
std::unique_ptr<ShmAllreduce> connect_shm(Communicator& comm, std::size_t slot_bytes,
                                          std::string* off_reason);

// The same for a group of ranks (world ranks in increasing order, this
// rank among them) that share one segment, e.g. the ranks of one host in a
// job that spans hosts. A collective over all of comm: every rank calls it
// with its own group, the groups partitioning the ranks. Null on every rank
// (reason in *off_reason) when any group's segment could not be mapped.
std::unique_ptr<ShmAllreduce> connect_shm_group(Communicator& comm, const std::vector<int>& group,
                                                std::size_t slot_bytes, std::string* off_reason);

// This host as connect_shm sees it (kernel boot, network namespace, host
// name), hashed: equal on two ranks exactly when they count as one host.
std::int64_t host_identity();

}  // namespace hpct::comm
