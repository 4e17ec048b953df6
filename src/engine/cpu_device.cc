#include "engine/cpu_device.h"

#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <new>
#include <thread>

#include "comm/reduce.h"

namespace hpct::engine {

// One stream: operations run in order on a thread of their own; `done`
// counts those finished, which is what events compare against.
struct CpuDevice::Queue {
  std::mutex mu;
  std::condition_variable cv;  // work arrived, work finished, or stop
  std::deque<std::function<void()>> work;  // GUARDED_BY(mu)
  std::uint64_t enqueued = 0;              // GUARDED_BY(mu)
  std::uint64_t done = 0;                  // GUARDED_BY(mu)
  bool stop = false;                       // GUARDED_BY(mu)
  Millis delay{0};
  std::thread thread;

  void push(std::function<void()> fn) {
    {
      std::lock_guard<std::mutex> lk(mu);
      work.push_back(std::move(fn));
      ++enqueued;
    }
    cv.notify_all();
  }
  // Waits until `seq` operations are done, at most `timeout` (or until stop).
  bool reached(std::uint64_t seq, Millis timeout) {
    std::unique_lock<std::mutex> lk(mu);
    return cv.wait_for(lk, timeout, [&] { return done >= seq || stop; }) && done >= seq;
  }
  void serve() {
    std::unique_lock<std::mutex> lk(mu);
    while (true) {
      cv.wait(lk, [&] { return stop || !work.empty(); });
      if (stop) return;
      auto fn = std::move(work.front());
      work.pop_front();
      lk.unlock();
      if (delay.count() > 0) std::this_thread::sleep_for(delay);
      fn();
      lk.lock();
      ++done;
      cv.notify_all();
    }
  }
};

namespace {

class CpuEvent final : public DeviceEvent {
 public:
  CpuEvent(std::shared_ptr<CpuDevice::Queue> q, std::uint64_t seq) : q_(std::move(q)), seq_(seq) {}
  bool query() const override {
    std::lock_guard<std::mutex> lk(q_->mu);
    return q_->done >= seq_;
  }
  bool synchronize(Millis timeout) const override { return q_->reached(seq_, timeout); }

  // For a stream's wait op: blocks until fired or the queue stops.
  void block_until_fired() const {
    std::unique_lock<std::mutex> lk(q_->mu);
    q_->cv.wait(lk, [&] { return q_->done >= seq_ || q_->stop; });
  }

 private:
  std::shared_ptr<CpuDevice::Queue> q_;
  std::uint64_t seq_;
};

}  // namespace

CpuDevice::CpuDevice(Options options) : options_(options) {
  comm_ = new_stream();  // queues_[0] the default stream, [1] the engine's
  comm_ = new_stream();
}

CpuDevice::~CpuDevice() {
  std::vector<std::shared_ptr<Queue>> qs;
  {
    std::lock_guard<std::mutex> lk(mu_);
    qs = queues_;
  }
  for (auto& q : qs) {
    {
      std::lock_guard<std::mutex> lk(q->mu);
      q->stop = true;
    }
    q->cv.notify_all();
  }
  for (auto& q : qs) q->thread.join();
}

Stream CpuDevice::new_stream() {
  auto q = std::make_shared<Queue>();
  q->delay = options_.op_delay;
  Queue* raw = q.get();
  q->thread = std::thread([raw] { raw->serve(); });
  std::lock_guard<std::mutex> lk(mu_);
  queues_.push_back(q);
  if (queues_.size() == 1) return Stream{nullptr};
  return Stream{raw};
}

CpuDevice::Queue& CpuDevice::queue(Stream s) {
  std::lock_guard<std::mutex> lk(mu_);
  if (s.handle == nullptr) return *queues_.front();
  return *static_cast<Queue*>(s.handle);
}

void* CpuDevice::allocate(std::size_t bytes) {
  void* p = std::aligned_alloc(256, (bytes + 255) / 256 * 256);
  if (p == nullptr) throw std::bad_alloc();
  return p;
}

void CpuDevice::free(void* p) { std::free(p); }

void CpuDevice::copy_async(void* dst, const void* src, std::size_t bytes, Stream s) {
  queue(s).push([=] {
    if (bytes > 0) std::memcpy(dst, src, bytes);
  });
}

void CpuDevice::cast_to_16_async(const float* src, std::uint16_t* dst, std::size_t n, comm::DataType wire,
                                 Stream s) {
  queue(s).push([=] { comm::floats_to_16(src, dst, n, wire); });
}

void CpuDevice::cast_from_16_async(const std::uint16_t* src, float* dst, std::size_t n, comm::DataType wire,
                                   float scale, Stream s) {
  queue(s).push([=] { comm::floats_from_16(src, dst, n, wire, scale); });
}

std::shared_ptr<DeviceEvent> CpuDevice::record(Stream s) {
  Queue& q = queue(s);
  std::shared_ptr<Queue> owner;
  {
    std::lock_guard<std::mutex> lk(mu_);
    for (auto& x : queues_) {
      if (x.get() == &q) owner = x;
    }
  }
  std::lock_guard<std::mutex> lk(q.mu);
  return std::make_shared<CpuEvent>(std::move(owner), q.enqueued);
}

void CpuDevice::wait(Stream s, const DeviceEvent& e) {
  // The event's stream and sequence are copied into the operation: the
  // caller may drop its event at once.
  auto ev = std::make_shared<CpuEvent>(dynamic_cast<const CpuEvent&>(e));
  queue(s).push([ev] { ev->block_until_fired(); });
}

bool CpuDevice::synchronize(Stream s, Millis timeout) {
  Queue& q = queue(s);
  std::uint64_t seq;
  {
    std::lock_guard<std::mutex> lk(q.mu);
    seq = q.enqueued;
  }
  return q.reached(seq, timeout);
}

void CpuDevice::enqueue(Stream s, std::function<void()> fn) { queue(s).push(std::move(fn)); }

std::uint64_t CpuDevice::operations() const {
  std::lock_guard<std::mutex> lk(mu_);
  std::uint64_t n = 0;
  for (const auto& q : queues_) {
    std::lock_guard<std::mutex> ql(q->mu);
    n += q->done;
  }
  return n;
}

}  // namespace hpct::engine
