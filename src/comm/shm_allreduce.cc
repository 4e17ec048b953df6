#include "comm/shm_allreduce.h"

#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <random>
#include <string>
#include <thread>

#include "comm/reduce.h"
#include "comm/reduce_simd.h"
#include "comm/shm_io.h"
#include "core/error.h"
#include "core/futex.h"

namespace hpct::comm {
namespace {

constexpr std::uint64_t kMagic = 0x68706374'73686d31ULL;  // "hpctshm1"
constexpr std::size_t kCounterStride = 128;    // a counter per two cache lines (no false sharing)
constexpr std::size_t kSlotAlign = 8192;       // slot halves stay page-aligned
constexpr std::size_t kChunkAlign = 64;        // chunk bounds on cache lines
constexpr std::size_t kBlockBytes = 16 << 10;  // step 2 reduces in L1-sized blocks
// Pieces from kStreamFromBytes have their own work timed, and their slot
// stores chosen by its speed (comm/slot_stores.h): plain, or non-temporal
// while plain stores are slow. HPCT_SHM_STREAM=0 keeps plain stores, 1 non-temporal
// ones (for side-by-side measurements).
constexpr std::size_t kStreamFromBytes = 256 << 10;

// HPCT_SHM_STREAM, read when a rank maps the segment. -1: choose by the
// copies' speed; 0: plain stores; 1: non-temporal.
int read_stream_setting() {
  const char* e = std::getenv("HPCT_SHM_STREAM");
  if (e == nullptr) return -1;
  return std::string(e) == "0" ? 0 : std::string(e) == "1" ? 1 : -1;
}
constexpr auto kSpin = std::chrono::microseconds(50);
constexpr auto kLivenessPeriod = std::chrono::milliseconds(50);

struct Header {
  std::uint64_t magic;
  std::uint64_t size;
  std::uint64_t slot_bytes;
};

std::atomic<std::uint64_t>* counter(void* base, int rank) {
  auto* p =
      static_cast<std::uint8_t*>(base) + kCounterStride * (1 + static_cast<std::size_t>(rank));
  return reinterpret_cast<std::atomic<std::uint64_t>*>(p);
}

// How many ranks sleep on `rank`'s counter (futex), on the next cache line.
std::atomic<std::uint32_t>* sleepers(void* base, int rank) {
  return reinterpret_cast<std::atomic<std::uint32_t>*>(
      reinterpret_cast<std::uint8_t*>(counter(base, rank)) + 64);
}

// The CPU `rank` ran on when it last arrived (-1: not known), beside its
// sleepers count: a waiter spins only while the rank it waits for is
// elsewhere, not on the core it holds.
std::atomic<std::int32_t>* last_cpu(void* base, int rank) {
  return reinterpret_cast<std::atomic<std::int32_t>*>(
      reinterpret_cast<std::uint8_t*>(counter(base, rank)) + 68);
}

// The round-trip probe's two lines, after the last rank's counter: side 0
// is written by rank 0 (ping), side 1 by rank 1 (pong).
std::atomic<std::uint64_t>* probe_line(void* base, int size, int side) {
  auto* p = static_cast<std::uint8_t*>(base) + kCounterStride * (1 + static_cast<std::size_t>(size)) +
            64 * static_cast<std::size_t>(side);
  return reinterpret_cast<std::atomic<std::uint64_t>*>(p);
}
constexpr int kProbeRounds = 16;
constexpr std::uint64_t kProbeEvery = 64;  // pieces
constexpr auto kProbeBound = std::chrono::microseconds(50);

// Waiters sleep on a futex on the counter's low 32 bits (core/futex.h),
// which change with every arrival.
static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
              "the futex word is the counter's low half");

std::size_t round_up(std::size_t n, std::size_t to) { return (n + to - 1) / to * to; }

std::string random_name() {
  std::random_device rd;
  char buf[64];
  std::snprintf(buf, sizeof buf, "/hpctrain-shm-%d-%08x%08x", static_cast<int>(::getpid()), rd(),
                rd());
  return buf;
}

// True when pid is gone or a zombie (exited, not yet reaped).
bool process_gone(pid_t pid) {
  if (::kill(pid, 0) != 0) return errno == ESRCH;
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(stat, line)) return false;
  const auto paren = line.rfind(')');
  if (paren == std::string::npos || paren + 2 >= line.size()) return false;
  const char state = line[paren + 2];
  return state == 'Z' || state == 'X';
}

}  // namespace

std::size_t ShmAllreduce::header_bytes(int size) {
  // The header, a counter per rank, and the probe's lines.
  return round_up(kCounterStride * (2 + static_cast<std::size_t>(size)), kSlotAlign);
}

ShmAllreduce::ShmAllreduce(std::string name, int rank, int size, std::size_t slot_bytes, void* base,
                           std::size_t mapped, bool owner)
    : name_(std::move(name)),
      rank_(rank),
      size_(size),
      slot_bytes_(slot_bytes),
      base_(base),
      mapped_(mapped),
      linked_(owner),
      stream_setting_(read_stream_setting()),
      pids_(static_cast<std::size_t>(size), 0) {}

ShmAllreduce::~ShmAllreduce() {
  unlink();
  ::munmap(base_, mapped_);
}

std::unique_ptr<ShmAllreduce> ShmAllreduce::create(int size, std::size_t slot_bytes) {
  if (size < 1) throw_invalid_argument("shared-memory allreduce: size must be >= 1");
  slot_bytes = round_up(std::max<std::size_t>(slot_bytes, 2 * kSlotAlign), 2 * kSlotAlign);
  const std::size_t total = header_bytes(size) + slot_bytes * static_cast<std::size_t>(size);
  const std::string name = random_name();
  const int fd = ::shm_open(name.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) throw_io("shm_open(" + name + ") for the shared-memory allreduce", errno);
  auto fail = [&](const std::string& what, int err) {
    ::close(fd);
    ::shm_unlink(name.c_str());
    throw_io(what, err);
  };
  if (const int rc = ::posix_fallocate(fd, 0, static_cast<off_t>(total)); rc != 0) {
    fail("cannot reserve " + std::to_string(total) +
             " bytes in /dev/shm for the shared-memory "
             "allreduce (" +
             std::to_string(size) + " ranks x " + std::to_string(slot_bytes) +
             " bytes); make /dev/shm larger (mount -o remount,size=1G /dev/shm), lower "
             "HPCT_SHM_SLOT_BYTES, or set HPCT_SHM=0 to use MPI_Allreduce",
         rc);
  }
  void* base = ::mmap(nullptr, total, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  const int map_errno = errno;
  if (base == MAP_FAILED) fail("mmap of " + name + " for the shared-memory allreduce", map_errno);
  ::close(fd);
  auto* h = static_cast<Header*>(base);
  h->size = static_cast<std::uint64_t>(size);
  h->slot_bytes = slot_bytes;
  for (int q = 0; q < size; ++q) {
    new (counter(base, q)) std::atomic<std::uint64_t>(0);
    new (sleepers(base, q)) std::atomic<std::uint32_t>(0);
    new (last_cpu(base, q)) std::atomic<std::int32_t>(-1);
  }
  for (int side = 0; side < 2; ++side) new (probe_line(base, size, side)) std::atomic<std::uint64_t>(0);
  std::atomic_thread_fence(std::memory_order_release);
  h->magic = kMagic;
  return std::unique_ptr<ShmAllreduce>(
      new ShmAllreduce(name, 0, size, slot_bytes, base, total, /*owner=*/true));
}

std::unique_ptr<ShmAllreduce> ShmAllreduce::open(const std::string& name, int rank, int size,
                                                 std::size_t slot_bytes) {
  if (rank < 1 || rank >= size) {
    throw_invalid_argument("shared-memory allreduce: open() is for ranks 1.." +
                           std::to_string(size - 1) + ", got rank " + std::to_string(rank));
  }
  slot_bytes = round_up(std::max<std::size_t>(slot_bytes, 2 * kSlotAlign), 2 * kSlotAlign);
  const std::size_t total = header_bytes(size) + slot_bytes * static_cast<std::size_t>(size);
  const int fd = ::shm_open(name.c_str(), O_RDWR | O_CLOEXEC, 0600);
  if (fd < 0) throw_io("shm_open(" + name + ") of rank 0's shared-memory allreduce segment", errno);
  struct stat st {};
  if (::fstat(fd, &st) != 0 || static_cast<std::size_t>(st.st_size) != total) {
    ::close(fd);
    throw_mismatch("shared-memory allreduce segment " + name + " has " +
                   std::to_string(st.st_size) + " bytes, this rank expects " +
                   std::to_string(total) + " (" + std::to_string(size) + " ranks x " +
                   std::to_string(slot_bytes) +
                   " bytes): set the same HPCT_SHM_SLOT_BYTES on every rank");
  }
  void* base = ::mmap(nullptr, total, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  const int map_errno = errno;
  ::close(fd);
  if (base == MAP_FAILED)
    throw_io("mmap of " + name + " for the shared-memory allreduce", map_errno);
  const auto* h = static_cast<const Header*>(base);
  std::atomic_thread_fence(std::memory_order_acquire);
  if (h->magic != kMagic || h->size != static_cast<std::uint64_t>(size) ||
      h->slot_bytes != slot_bytes) {
    ::munmap(base, total);
    throw_mismatch("shared-memory allreduce segment " + name + " was not made for " +
                   std::to_string(size) + " ranks with " + std::to_string(slot_bytes) +
                   "-byte slots");
  }
  return std::unique_ptr<ShmAllreduce>(
      new ShmAllreduce(name, rank, size, slot_bytes, base, total, /*owner=*/false));
}

void ShmAllreduce::unlink() {
  if (!linked_) return;
  ::shm_unlink(name_.c_str());
  linked_ = false;
}

void ShmAllreduce::set_pids(const std::vector<pid_t>& pids) {
  if (pids.size() != static_cast<std::size_t>(size_)) {
    throw_invalid_argument("shared-memory allreduce: " + std::to_string(pids.size()) +
                           " pids for " + std::to_string(size_) + " ranks");
  }
  for (std::size_t q = 0; q < pids.size(); ++q) {
    const bool visible = pids[q] > 0 && (::kill(pids[q], 0) == 0 || errno == EPERM);
    pids_[q] = visible ? pids[q] : 0;
  }
}

std::uint8_t* ShmAllreduce::slot_half(int rank, std::uint64_t piece) const {
  return static_cast<std::uint8_t*>(base_) + header_bytes(size_) +
         slot_bytes_ * static_cast<std::size_t>(rank) + (piece % 2) * (slot_bytes_ / 2);
}

int ShmAllreduce::gone_rank() const {
  for (int q = 0; q < size_; ++q) {
    const pid_t pid = q < static_cast<int>(pids_.size()) ? pids_[static_cast<std::size_t>(q)] : 0;
    if (q != rank_ && pid != 0 && process_gone(pid)) return q;
  }
  return -1;
}

void ShmAllreduce::check_alive(int q, const char* what) const {
  const pid_t pid = pids_[static_cast<std::size_t>(q)];
  if (pid != 0 && process_gone(pid)) {
    throw_peer_failure("rank " + std::to_string(q) + " (pid " + std::to_string(pid) +
                       ") exited during the shared-memory allreduce, while this rank waited for "
                       "it to " +
                       what);
  }
}

int ShmAllreduce::go_home(int my_cpu) {
  if (pinned_ || sched_getaffinity(0, sizeof mask_, &mask_) != 0) return my_cpu;
  if (CPU_COUNT(&mask_) < size_) return my_cpu;  // no CPU of its own for every rank
  int home = -1;
  for (int cpu = 0, seen = 0; cpu < CPU_SETSIZE && home < 0; ++cpu) {
    if (CPU_ISSET(cpu, &mask_) && seen++ == rank_) home = cpu;
  }
  cpu_set_t one;
  CPU_ZERO(&one);
  CPU_SET(home, &one);
  // The kernel moves the thread to `home` before the call returns.
  if (sched_setaffinity(0, sizeof one, &one) != 0) return my_cpu;
  pinned_ = true;
  return sched_getcpu();
}

void ShmAllreduce::end_operation() {
  if (!pinned_) return;
  sched_setaffinity(0, sizeof mask_, &mask_);  // the thread stays where it is for now
  pinned_ = false;
}

void ShmAllreduce::arrive_and_wait(std::uint64_t generation, const Deadline& deadline,
                                   const char* what, std::size_t count, DataType dtype) {
  // seq_cst store, then the sleepers load: pairs with the waiter's
  // increment-then-reload below, so a waiter either sees this arrival or is
  // counted here and woken.
  int my_cpu = sched_getcpu();
  last_cpu(base_, rank_)->store(my_cpu, std::memory_order_relaxed);
  counter(base_, rank_)->store(generation);
  if (sleepers(base_, rank_)->load() != 0) futex_wake_all(counter(base_, rank_));
  using Clock = std::chrono::steady_clock;
  const auto start = Clock::now();
  auto next_liveness = start + kLivenessPeriod;
  for (int q = 0; q < size_; ++q) {
    if (q == rank_) continue;
    const auto* c = counter(base_, q);
    while (c->load(std::memory_order_acquire) < generation) {
      const auto now = Clock::now();
      if (now - start < kSpin) {
        // Spin (pause, holding the core) only while rank q was last seen on
        // another CPU: then it is running there or will be soon. When it
        // last ran on this very CPU it needs the core this rank holds, and
        // the rank sleeps at once instead. Never sched_yield: under the
        // kernel's EEVDF scheduler (Linux 6.6 on) a yield pushes this rank's
        // deadline back by a whole slice, so a busy neighbour process keeps
        // the core for milliseconds, once per wait; a futex sleeper that is
        // woken keeps its lag and takes the core back at once.
        const int q_cpu = last_cpu(base_, q)->load(std::memory_order_relaxed);
        if (q_cpu < 0 || q_cpu != my_cpu) {
          cpu_relax();
          continue;
        }
        // Stacked: rank q needs this core. Two ranks that wake each other
        // through the futex tend to stay on one CPU (the wake-up places the
        // sleeper beside its waker when the other CPU is busy, even with
        // lower-priority work), then every wait is a context switch and the
        // operation runs on one core. So both ranks go to CPUs of their
        // own for the rest of the operation, and spin apart.
        if (!pinned_) {
          my_cpu = go_home(my_cpu);
          last_cpu(base_, rank_)->store(my_cpu, std::memory_order_relaxed);
          if (my_cpu != q_cpu) continue;
        }
      }
      if (now >= deadline.end()) {
        throw_timeout("timed out after " + std::to_string(deadline.budget().count()) +
                      " ms in the shared-memory allreduce of " + std::to_string(count) + " " +
                      dtype_name(dtype) + " waiting for rank " + std::to_string(q) + " (pid " +
                      std::to_string(pids_[static_cast<std::size_t>(q)]) + ") to " + what +
                      "; a peer rank is stopped, dead or in another operation. The "
                      "communicator is broken");
      }
      if (now >= next_liveness) {
        check_alive(q, what);
        next_liveness = now + kLivenessPeriod;
      }
      // Sleep until rank q arrives (its store wakes us), the next liveness
      // check or the deadline, whichever is first.
      const auto until = std::min(next_liveness, deadline.end());
      sleepers(base_, q)->fetch_add(1);
      const std::uint64_t seen = c->load();
      if (seen < generation) futex_wait(c, static_cast<std::uint32_t>(seen), until - now);
      sleepers(base_, q)->fetch_sub(1);
    }
  }
}

double ShmAllreduce::probe_round_trip() {
  if (size_ != 2) return -1;
  // Values of this probe only: a line left by an abandoned one never matches.
  const std::uint64_t first = ++probes_ * (kProbeRounds + 1);
  return time_line_round_trips(probe_line(base_, size_, rank_), probe_line(base_, size_, 1 - rank_),
                               rank_ == 0, first, kProbeRounds, kProbeBound);
}

void ShmAllreduce::note_piece_work(std::chrono::steady_clock::duration work, std::size_t bytes) {
  const double seconds = std::chrono::duration<double>(work).count();
  if (seconds > 0) {
    stores_.note_plain_piece(std::chrono::steady_clock::now(), bytes,
                             static_cast<double>(bytes) / seconds);
  }
}


void ShmAllreduce::allreduce(const void* in, void* out, std::size_t count, DataType dtype,
                             ReduceOp op, const Deadline& deadline) {
  if (count == 0 || size_ == 1) {
    if (in != nullptr && in != out && count != 0) std::memcpy(out, in, count * dtype_size(dtype));
    return;
  }
  OneBuffer io(in != nullptr ? in : out, out, dtype_size(dtype));
  run(io, count, dtype, op, deadline);
}

void ShmAllreduce::allreduce(const std::vector<BufferSegment>& segments, DataType dtype,
                             ReduceOp op, const Deadline& deadline) {
  std::size_t count = 0;
  for (const auto& s : segments) count += s.count;
  if (count == 0 || size_ == 1) return;
  Segments io(segments, dtype_size(dtype));
  run(io, count, dtype, op, deadline);
}

// This rank's chunk [lo, hi) of the piece at `base`, reduced in rank order,
// into the slot (in L1-sized blocks) and from there to the output.
// Accumulate in the slot, not the output: in place, the output is this
// rank's input, still to be read when the rank is not 0 or 1.
template <typename Io>
void ShmAllreduce::reduce_chunk(Io& io, std::size_t base, std::size_t lo, std::size_t hi,
                                std::uint64_t piece, DataType dtype, ReduceOp op, bool stream) {
  const std::size_t es = dtype_size(dtype);
  const std::size_t block = kBlockBytes / es;
  std::uint8_t* mine = slot_half(rank_, piece);
  for (std::size_t b = lo; b < hi; b += block) {
    const std::size_t m = std::min(block, hi - b);
    const std::uint8_t* own = io.view(base + b, m, scratch_.data());
    auto input_of = [&](int q) -> const std::uint8_t* {
      return q == rank_ ? own : slot_half(q, piece) + b * es;
    };
    std::uint8_t* acc = mine + b * es;
    // Two float32 ranks summing or averaging (gradients): the result is
    // stored to the slot and the output in one pass, where the output is
    // one span.
    const bool sum_or_avg = op == ReduceOp::kSum || op == ReduceOp::kAvg;
    std::uint8_t* out = size_ == 2 && dtype == DataType::kFloat32 && sum_or_avg
                            ? io.span(base + b, m)
                            : nullptr;
    if (out != nullptr) {
      auto* sum = stream ? simd::sum_floats_to_shared_and : simd::sum_floats_to_both;
      sum(reinterpret_cast<float*>(acc), reinterpret_cast<float*>(out),
          reinterpret_cast<const float*>(input_of(0)),
          reinterpret_cast<const float*>(input_of(1)), m, op == ReduceOp::kAvg ? 0.5f : 1.0f);
      continue;
    }
    for (int q = 1; q < size_; ++q) {
      const std::uint8_t* x = q == 1 ? input_of(0) : acc;
      if (op == ReduceOp::kAvg && q == size_ - 1) {
        sum_and_average(acc, x, input_of(q), m, dtype, size_);  // the division folded in
      } else {
        reduce_elements(acc, x, input_of(q), m, dtype, op);
      }
    }
    io.write(base + b, m, acc);
  }
}

template <typename Io>
void ShmAllreduce::run(Io& io, std::size_t count, DataType dtype, ReduceOp op,
                       const Deadline& deadline) {
  struct Unpin {  // whichever way the operation ends
    ShmAllreduce* self;
    ~Unpin() { self->end_operation(); }
  } unpin{this};
  const std::size_t es = dtype_size(dtype);
  const std::size_t align = std::max<std::size_t>(1, kChunkAlign / es);
  // Up to half a slot goes as one piece (1.1 MB: not a full piece and a
  // sliver that costs two more arrivals). Up to four slots go in equal
  // pieces of at most a quarter slot, whose copies and reduction stay in a
  // core's L2 (1 MiB on the EPYC hosts measured: 4 MiB in 1 MiB pieces
  // 0.45-0.46x MPI_Allreduce's time, in 2 MiB pieces 0.53-0.55x; 16 MiB
  // 0.33-0.35x against 0.45-0.49x, and 1.4-1.7 against 2.0-2.2 ms beside
  // two CPU-bound processes). Larger buffers go in half-slot pieces: half
  // the arrivals, each a chance to wait for a descheduled peer on a busy
  // host (64 MiB in quarter-slot pieces took 51 ms in 2 of 3 runs at load
  // 3-4, against 9-31 ms; docs/comm.md).
  const std::size_t half_slot = slot_bytes_ / 2 / es;
  const std::size_t max_piece =
      count > half_slot && count <= 8 * half_slot ? half_slot / 2 : half_slot;
  const std::size_t n_pieces = (count + max_piece - 1) / max_piece;
  const std::size_t piece_elems =
      std::min(max_piece, round_up((count + n_pieces - 1) / n_pieces, align));
  scratch_.resize(kBlockBytes);
  const auto n_ranks = static_cast<std::size_t>(size_);

  for (std::size_t base = 0; base < count; base += piece_elems) {
    const std::size_t n = std::min(piece_elems, count - base);
    auto bound = [&](std::size_t q) -> std::size_t {
      if (q >= n_ranks) return n;
      const std::size_t b = n * q / n_ranks;
      return b - b % align;
    };
    const std::uint64_t piece = pieces_++;
    std::uint8_t* mine = slot_half(rank_, piece);
    const std::size_t lo = bound(static_cast<std::size_t>(rank_));
    const std::size_t hi = bound(static_cast<std::size_t>(rank_) + 1);

    // 1. Every chunk but this rank's own goes to its slot.
    const bool big = n * es >= kStreamFromBytes;
    const auto copy_start = std::chrono::steady_clock::now();
    const int setting = stream_setting_;
    const bool stream = big && (setting == 1 || (setting == -1 && stores_.stream(copy_start)));
    io.read(base, lo, mine, stream);
    io.read(base + hi, n - hi, mine + hi * es, stream);
    // The piece's own work, its waits left out: the copy, the reduction and
    // the copy out (timed only with plain stores, when the choice is free).
    const bool timed = big && !stream && setting == -1;
    auto work = timed ? std::chrono::steady_clock::now() - copy_start
                      : std::chrono::steady_clock::duration{};
    if (stream) simd::store_fence();  // the slot's bytes before the arrival
    arrive_and_wait(++generation_, deadline, "contribute its share", count, dtype);
    // Both ranks are here (the same piece number on each): time how lines
    // cross between their CPUs now and then.
    if (size_ == 2 && piece % kProbeEvery == 0) {
      const double rt = probe_round_trip();
      if (rt >= 0) stores_.note_round_trip(std::chrono::steady_clock::now(), rt);
    }
    const auto reduce_start = timed ? std::chrono::steady_clock::now() : copy_start;

    // 2. This rank's chunk, reduced in rank order, into the slot and the output.
    reduce_chunk(io, base, lo, hi, piece, dtype, op, stream);
    if (timed) work += std::chrono::steady_clock::now() - reduce_start;
    if (stream) simd::store_fence();
    arrive_and_wait(++generation_, deadline, "reduce its chunk", count, dtype);
    const auto out_start = timed ? std::chrono::steady_clock::now() : copy_start;

    // 3. Every other rank's reduced chunk, from its slot.
    for (int q = 0; q < size_; ++q) {
      if (q == rank_) continue;
      const std::size_t qlo = bound(static_cast<std::size_t>(q));
      const std::size_t qhi = bound(static_cast<std::size_t>(q) + 1);
      io.write(base + qlo, qhi - qlo, slot_half(q, piece) + qlo * es);
    }
    if (timed) {
      work += std::chrono::steady_clock::now() - out_start;
      note_piece_work(work, n * es);
    }
  }
}

}  // namespace hpct::comm
