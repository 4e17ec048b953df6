#include "data/source/spool.h"

#include <algorithm>
#include <chrono>
#include <mutex>
#include <utility>
#include <vector>

#include "data/source/short_slice.h"

namespace hpct::data {
namespace {

std::uint64_t now_us() {
  return static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::microseconds>(
                                        std::chrono::steady_clock::now().time_since_epoch())
                                        .count());
}

class RemoteFile final : public RandomAccessFile {
 public:
  RemoteFile(std::shared_ptr<Spool> s, SourceCounters* c, Millis bound)
      : s_(std::move(s)), c_(c), bound_(bound) {}
  size_t read_at(std::uint64_t offset, char* buf, size_t n) const override {
    const std::uint64_t want = std::min<std::uint64_t>(s_->size, offset + n);
    if (offset >= want) return 0;
    if (s_->available.load() < s_->needed(offset, want)) wait_for(offset, want);
    std::memcpy(buf, s_->map + offset, want - offset);
    return want - offset;
  }
  const char* view(std::uint64_t offset, size_t n) const override {
    if (offset > s_->size || n > s_->size - offset) return nullptr;
    if (s_->available.load() < s_->needed(offset, offset + n)) wait_for(offset, offset + n);
    return s_->map + offset;
  }
  std::uint64_t size() const override { return s_->size; }
  const std::string& name() const override { return s_->url; }

 private:
  // Waits for bytes [offset, want_byte) (a stall, counted) or the
  // download's error. It asks to be woken a little past them: a quarter of
  // the bytes before them in fetch order, at most 1 MiB, so the first
  // samples come at once and a reader that keeps pace with the wire sleeps
  // through most network reads.
  void wait_for(std::uint64_t offset, std::uint64_t want_byte) const {
    // In fetch order from here on (Spool::needed).
    const std::uint64_t want = s_->needed(offset, want_byte);
    const std::uint64_t slack = std::min<std::uint64_t>(want / 4, 1ull << 20);
    std::uint64_t target = std::min<std::uint64_t>(s_->size, want + slack);
    bool resume = false;
    {
      // Bytes its hint did not ask for: all of the rest, then. No slack
      // past where the fetch parks: it would never come.
      std::lock_guard<std::mutex> lock(s_->mu);
      if (want > s_->wanted) {
        s_->wanted = UINT64_MAX;
        resume = s_->parked;
      }
      target = std::max(want, std::min(target, s_->wanted));
    }
    if (resume && s_->on_stall) s_->on_stall->resume_spool(s_);
    if (s_->on_stall) (*s_->on_stall)();
    const ShortSlice woken_at_once;  // short_slice.h
    std::unique_lock<std::mutex> lock(s_->mu);
    s_->waiters += 1;
    const std::uint64_t t0 = now_us();
    c_->stalls += 1;
    const auto deadline = SteadyClock::now() + bound_;
    bool arrived = true;
    while (true) {
      // Lowered before the bytes are checked: the fetch thread stores
      // `available` before it reads wake_at, so either it sees this target
      // (and notifies, under the lock this wait holds) or this check sees
      // its bytes.
      if (target < s_->wake_at.load()) s_->wake_at.store(target);
      if (s_->available.load() >= want || s_->error) break;
      if (s_->cv.wait_until(lock, deadline) == std::cv_status::timeout &&
          s_->available.load() < want && !s_->error) {
        arrived = false;
        break;
      }
    }
    c_->stall_us += now_us() - t0;
    s_->waiters -= 1;
    if (!arrived) {
      throw_timeout(s_->url + ": byte offset " + std::to_string(offset) +
                    " did not arrive within " + std::to_string(bound_.count() / 1000) + " s");
    }
    if (s_->available.load() < want) {
      try {
        std::rethrow_exception(s_->error);
      } catch (const Error& e) {
        throw Error(e.code(), std::string(e.what()) + " (reading byte offset " +
                                  std::to_string(offset) + ")");
      }
    }
  }
  std::shared_ptr<Spool> s_;
  SourceCounters* c_;
  Millis bound_;
};

struct KeptRegion {
  char* p;
  std::uint64_t len;
};
// Never destroyed: a spool may be dropped during the exit's static
// destructors (a file system held by a static).
struct Kept {
  std::mutex mu;
  std::vector<KeptRegion> regions;  // guarded by mu
  std::uint64_t total = 0;          // guarded by mu
};
Kept& kept_state() {
  static Kept* k = new Kept;
  return *k;
}

constexpr std::uint64_t kHuge = 2u << 20;

}  // namespace

char* SpoolMemory::take(std::uint64_t n, std::uint64_t in_use, std::uint64_t bound,
                        std::uint64_t* len) {
  const std::uint64_t want = (n + kHuge - 1) / kHuge * kHuge;
  std::vector<KeptRegion> release;
  char* out = nullptr;
  Kept& k = kept_state();
  std::vector<KeptRegion>& kept = k.regions;
  std::uint64_t& kept_total = k.total;
  {
    std::lock_guard<std::mutex> lock(k.mu);
    auto best = kept.end();
    for (auto it = kept.begin(); it != kept.end(); ++it) {
      if (it->len >= want && it->len <= want + want / 4 + kHuge &&
          (best == kept.end() || it->len < best->len))
        best = it;
    }
    if (best != kept.end()) {
      out = best->p;
      *len = best->len;
      kept_total -= best->len;
      kept.erase(best);
    }
  }
  if (out != nullptr) {
    // The pages past what this spool needs go back to the kernel, so a
    // spool holds no more than its size rounded up to 2 MiB.
    if (*len > want) ::madvise(out + want, *len - want, MADV_DONTNEED);
    return out;
  }
  {
    std::lock_guard<std::mutex> lock(k.mu);
    // Fresh memory: the kept regions give way first, least recently kept
    // first, so that spools and kept regions together stay within bound.
    // (in_use counts this spool already.)
    size_t drop = 0;
    while (drop < kept.size() && kept_total + in_use > bound) {
      kept_total -= kept[drop].len;
      release.push_back(kept[drop++]);
    }
    kept.erase(kept.begin(), kept.begin() + static_cast<std::ptrdiff_t>(drop));
  }
  for (const auto& r : release) ::munmap(r.p, r.len);
  void* m = ::mmap(nullptr, want, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (m == MAP_FAILED) return nullptr;
  // No huge pages asked for: on a VM whose balloon takes free memory back
  // (virtio free page reporting, 2 MiB blocks), a fresh huge page is
  // faulted in by the host, and perf put 0.3 CPU-s of clear_page under the
  // spools' copies in the first 4 s of a 2-rank training from a namespace
  // host (194 MB); with small pages it was 0.1% of the samples
  // (2026-11-27, 2-vCPU EPYC). A 100 MB region took 7-8 ms to fill with
  // huge pages the host still backed, 208 ms with ones it did not, and
  // 44-47 ms with small pages either way.
  *len = want;
  return static_cast<char*>(m);
}

void SpoolMemory::give(char* p, std::uint64_t len, std::uint64_t bound) {
  Kept& k = kept_state();
  {
    std::lock_guard<std::mutex> lock(k.mu);
    if (k.total + len <= bound) {
      k.regions.push_back({p, len});
      k.total += len;
      return;
    }
  }
  ::munmap(p, len);
}

std::uint64_t SpoolMemory::kept_bytes() {
  Kept& k = kept_state();
  std::lock_guard<std::mutex> lock(k.mu);
  return k.total;
}

std::unique_ptr<RandomAccessFile> open_spool_reader(std::shared_ptr<Spool> s, SourceCounters* c, Millis bound) {
  return std::make_unique<RemoteFile>(std::move(s), c, bound);
}

}  // namespace hpct::data
