#include "bench/pacer.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdint>

#include "core/error.h"
#include "core/fd.h"
#include "core/futex.h"

namespace hpct::bench {

constexpr int kMaxRanks = 256;  // a page's worth; this paces jobs on one host

struct PacePage {
  std::atomic<std::uint32_t> until;    // ranks run timed steps below it (futex)
  std::atomic<std::uint32_t> parks;    // bumped by every rank that parks (futex)
  std::atomic<std::int32_t> parent_pid;
  std::atomic<std::uint32_t> cancelled;
  std::atomic<std::int32_t> parked[kMaxRanks];  // the step a rank waits before; -1 while it runs
};
static_assert(sizeof(PacePage) <= 4096, "one page");

namespace {

constexpr Millis kSlice(100);  // between checks that the other side is still there

PacePage* map_page(const std::string& path, bool create) {
  UniqueFd fd(::open(path.c_str(), create ? O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC : O_RDWR | O_CLOEXEC, 0600));
  if (!fd.valid()) throw_io((create ? "create " : "open ") + path, errno);
  if (create && ::ftruncate(fd.get(), 4096) != 0) throw_io("size " + path, errno);
  void* p = ::mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd.get(), 0);
  if (p == MAP_FAILED) throw_io("map " + path, errno);
  return static_cast<PacePage*>(p);
}

}  // namespace

PaceParent::PaceParent(const std::string& path, int ranks) : path_(path), ranks_(ranks) {
  if (ranks < 1 || ranks > kMaxRanks) {
    throw_invalid_argument("pacing " + std::to_string(ranks) + " ranks: at most " +
                           std::to_string(kMaxRanks) + " on one host");
  }
  page_ = map_page(path, true);
  page_->until.store(0);  // a fresh file is zeros: every rank waits before step 0
  page_->parent_pid.store(static_cast<std::int32_t>(::getpid()));
  for (auto& p : page_->parked) p.store(-1);
}

PaceParent::~PaceParent() {
  if (page_ != nullptr) ::munmap(page_, 4096);
}

void PaceParent::run_until(int until) {
  page_->until.store(static_cast<std::uint32_t>(until), std::memory_order_release);
  futex_wake_all(&page_->until);
}

void PaceParent::cancel() {
  page_->cancelled.store(1, std::memory_order_release);
  futex_wake_all(&page_->until);
}

bool PaceParent::wait_parked(int step, Millis timeout, const std::function<bool()>& ended) {
  Deadline deadline(timeout);
  while (true) {
    const std::uint32_t seen = page_->parks.load(std::memory_order_acquire);
    std::string missing;
    for (int r = 0; r < ranks_; ++r) {
      if (page_->parked[r].load(std::memory_order_acquire) != step) missing += " " + std::to_string(r);
    }
    if (missing.empty()) return true;
    if (ended()) return false;
    if (deadline.expired()) {
      throw_timeout("bench train: waited " + std::to_string(timeout.count() / 1000) +
                    " s for rank(s)" + missing + " of the " + std::to_string(ranks_) +
                    "-rank job to reach timed step " + std::to_string(step) + " (" + path_ + ")");
    }
    futex_wait(&page_->parks, seen, std::min(kSlice, std::max(Millis(1), deadline.remaining())));
  }
}

PaceRank::PaceRank(const std::string& path, int rank, Millis bound) : rank_(rank), bound_(bound) {
  if (rank < 0 || rank >= kMaxRanks) throw_invalid_argument("pacing: rank " + std::to_string(rank) + " out of range");
  page_ = map_page(path, false);
}

PaceRank::~PaceRank() {
  if (page_ != nullptr) ::munmap(page_, 4096);
}

void PaceRank::before_step(int step) {
  const auto s = static_cast<std::uint32_t>(step);
  if (s < page_->until.load(std::memory_order_acquire)) return;
  page_->parked[rank_].store(step, std::memory_order_release);
  page_->parks.fetch_add(1, std::memory_order_acq_rel);
  futex_wake_all(&page_->parks);
  Deadline deadline(bound_);
  const pid_t parent = page_->parent_pid.load();
  while (true) {
    if (page_->cancelled.load(std::memory_order_acquire) != 0) {
      throw_peer_failure("bench train: rank " + std::to_string(rank_) +
                         " stops before timed step " + std::to_string(step) +
                         ": the run was cancelled (another job of it failed)");
    }
    const std::uint32_t until = page_->until.load(std::memory_order_acquire);
    if (s < until) break;
    if (::kill(parent, 0) != 0 && errno == ESRCH) {
      throw_peer_failure("bench train: rank " + std::to_string(rank_) + " waits for its turn, but the process "
                         "pacing the run (pid " + std::to_string(parent) + ") is gone");
    }
    if (deadline.expired()) {
      throw_timeout("bench train: rank " + std::to_string(rank_) + " waited " +
                    std::to_string(bound_.count() / 1000) + " s for its turn to run timed step " +
                    std::to_string(step) + " (pacing process pid " + std::to_string(parent) + ")");
    }
    futex_wait(&page_->until, until, std::min(kSlice, std::max(Millis(1), deadline.remaining())));
  }
  page_->parked[rank_].store(-1, std::memory_order_release);
}

}  // namespace hpct::bench
