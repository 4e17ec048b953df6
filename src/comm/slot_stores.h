// How a rank of the shared-memory allreduce stores into its slots: plain
// stores, or non-temporal ones while plain stores are slow (docs/comm.md,
// "Slow stretches" and "A second VM").
//
// A rank's copy into its slot writes lines its peer read in the last
// operation, and each plain store takes such a line back from the peer's
// cache. On the VMs measured the host sometimes places the two vCPUs where
// a line takes about five times longer to cross (a round trip of 500-570 ns
// against 45-125), for seconds to minutes; plain stores into the peer's
// lines then run at a fifth of their speed (2.5 against 10-12 GB/s on one
// VM, 6.5 against 31-48 GB/s on another) and the allreduce takes 3-16x its
// time. Non-temporal stores take no line back and keep their speed, but
// leave the data in memory, not in a cache, so in the usual case the peer's
// reads make the allreduce 1.4-2.5x slower. Two signs choose:
//
// - Two ranks time the round trip of a cache line between their CPUs
//   (note_round_trip, every 64 pieces from the first): above
//   kSlowRoundTripNs the rank streams until the next probe. This is the
//   direct sign of a stretch, and catches one a process starts in.
// - Every rank times each plain piece's own work: the copy into the slot,
//   the reduction and the copy out, its two waits left out
//   (note_plain_piece). After kSlowInARow slow pieces in a row it streams
//   for kStreamFor, then tries plain stores again. A piece is slow below
//   kSlowBytesPerS, or below 1/kSlowFactor of the typical speed of its
//   kind: the median of the last kKept pieces of that kind that were not
//   slow, once there are kMinKept of them. This serves more than two ranks
//   and the time between probes. On the second VM 1 MiB pieces did that
//   work at a median 20 GB/s (a tenth of them below 10-12) and at 7.8 in a
//   stretch; the slot copy alone, which the fixed 5 GB/s bound used to
//   judge, told the two apart less well (512 KiB copies mostly above 17
//   GB/s against a median of 9.6 in a stretch, above 5 in both).
//
// Each rank chooses for itself: the bits are the same either way.
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>

namespace hpct::comm {

class SlotStoreChoice {
 public:
  using Clock = std::chrono::steady_clock;
  static constexpr double kSlowBytesPerS = 5e9;
  static constexpr double kSlowFactor = 2.5;
  static constexpr int kSlowInARow = 3;
  static constexpr int kKept = 16;
  static constexpr int kMinKept = 8;
  static constexpr auto kStreamFor = std::chrono::milliseconds(500);
  // Pieces up to this size stay in a core's L2 and run about twice as fast
  // as larger ones: each kind has its own typical speed.
  static constexpr std::size_t kSmallPieceBytes = 1 << 20;
  // The VMs measured: 45-125 ns usually, 470-570 ns in their stretches.
  static constexpr double kSlowRoundTripNs = 300;
  static constexpr auto kRoundTripHold = std::chrono::milliseconds(500);

  // A piece of `bytes` stored plainly, ended at `now`, did its own work
  // (the waits left out) at bytes_per_s.
  void note_plain_piece(Clock::time_point now, std::size_t bytes, double bytes_per_s);
  // Two ranks: a cache line's round trip between their CPUs, measured at
  // `now` (ShmAllreduce::probe_round_trip). Above kSlowRoundTripNs the rank
  // streams until a probe finds the line fast again (at most
  // kRoundTripHold); at or below it, streaming ends.
  void note_round_trip(Clock::time_point now, double ns);
  // Whether the copies of a piece starting at `now` store non-temporally.
  bool stream(Clock::time_point now) const { return now < stream_until_; }
  // The median of the kept speeds of pieces of this size's kind; 0 while
  // fewer than kMinKept are kept.
  double typical(std::size_t bytes) const;

 private:
  struct Kept {
    std::array<double, kKept> speeds{};
    int n = 0;
    int next = 0;
  };
  Kept kept_[2];  // small pieces, larger ones
  int slow_in_a_row_ = 0;
  Clock::time_point stream_until_{};
};

// Times `rounds` round trips of a value between two cache lines: `mine`,
// which this side writes, and `theirs`, which the other side writes; the
// side with `starts` writes first. Both sides call it with the same
// `first` (values first .. first + rounds - 1). Returns nanoseconds per
// round trip, or -1 when the other side did not answer within `bound`.
double time_line_round_trips(std::atomic<std::uint64_t>* mine,
                             const std::atomic<std::uint64_t>* theirs, bool starts,
                             std::uint64_t first, int rounds, std::chrono::microseconds bound);

}  // namespace hpct::comm
