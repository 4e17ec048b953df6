// `--compression auto` (HPCT_COMPRESSION=auto, the default): whether a
// float32 allreduce goes on the wire as float16, decided by measuring, on
// this job's communicator, what the casts cost against what the halved bytes
// save.
//
// Protocol, per size class (a power of two of the allreduce's float32 bytes,
// the largest class 16 MiB and up): the first allreduce of a class probes it
// before it runs. Every rank times, alternating, kProbeRepeats allreduces of
// a scratch buffer of the class's size as float32, and as float16 with the
// cast there and back counted; the best time of each, maxed over ranks by
// one more allreduce, decides for every rank alike: float16 when its time is
// below kKeepMargin of float32's. So the decision is collective: every rank
// must call choose() with the same counts in the same order, which the
// engine's execution order guarantees (every rank executes the same
// responses in the same order).
//
// Never probed, never compressed: one rank; ranks that are all on one host
// (shared memory, or MPI's shared-memory transport: the casts cost more than
// the copy they save: shared/notes, Horovod -20%), known from an allreduce
// whose algorithm is `shm:` or, at the first allreduce worth a probe, from
// an allgather of comm::host_identity(); allreduces under kMinBytes
// (latency, not bytes, sets their time).
//
// Not thread-safe: the engine calls it from whichever thread runs its round.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "engine/message.h"

namespace hpct::engine {

class AutoCompression {
 public:
  static constexpr std::size_t kMinBytes = 64 << 10;
  static constexpr int kMaxClass = 24;  // 16 MiB: above it both costs grow alike
  static constexpr int kProbeRepeats = 3;
  static constexpr double kKeepMargin = 0.9;

  struct Decision {
    std::size_t probe_bytes = 0;  // float32 bytes of the class's probe (0: not probed)
    double none_ms = 0;           // slowest rank's best float32 allreduce
    double fp16_ms = 0;           // slowest rank's best float16 allreduce, casts included
    Compression choice = Compression::kNone;
    std::string reason;
  };

  // host_id: this rank's host, equal on ranks of one host (default:
  // comm::host_identity; tests give threads of one process distinct hosts).
  explicit AutoCompression(comm::Communicator& comm,
                           std::function<std::int64_t()> host_id = nullptr);
  AutoCompression(const AutoCompression&) = delete;
  AutoCompression& operator=(const AutoCompression&) = delete;

  // kFp16 or kNone for an allreduce of `count` float32 elements. Collective
  // the first time a size class is seen (see above); blocks for the probe.
  Compression choose(std::size_t count);
  // The rule on measured times, for tests: fp16 when it is clearly faster.
  static Compression rule(double none_ms, double fp16_ms);
  // Every class decided so far (class = floor(log2(bytes)), capped).
  const std::vector<std::pair<int, Decision>>& decisions() const { return decisions_; }

 private:
  Decision probe(int size_class);

  comm::Communicator& comm_;
  bool local_;              // no network between the ranks (one rank, or one host)
  bool hosts_known_ = false;  // the host allgather ran
  std::function<std::int64_t()> host_id_;
  std::vector<std::pair<int, Decision>> decisions_;
};

}  // namespace hpct::engine
