// The engine's device path on CpuDevice (cpu_device.h): real stream and
// event ordering without a GPU. Readiness events that fire late, results
// read on a consumer stream only after the completion event, fusion of
// device tensors (staged through the host communicator, and on the stream
// through a StreamCollectives standing in for NCCL), fp16 on the device, and
// the bounded failures that name the tensor.
#include "engine/cpu_device.h"

#include <gtest/gtest.h>

#include <atomic>
#include <condition_variable>
#include <future>
#include <mutex>
#include <thread>

#include "comm/testing/thread_world.h"
#include "core/error.h"
#include "engine/blocking_stream_collectives.h"
#include "engine/engine.h"

namespace hpct::engine {
namespace {

using comm::testing::run_gloo_world;

Logger device_quiet(int rank) {
  return Logger(LogLevel::kError, "all", rank, [](const std::string&) {});
}

EngineOptions device_fast_options() {
  EngineOptions o;
  o.cycle_ms = 1;
  o.stall_warn_s = 2;
  return o;
}

// A gate a stream can be held at: open() lets it through.
class Gate {
 public:
  void open() {
    {
      std::lock_guard<std::mutex> lk(mu_);
      open_ = true;
    }
    cv_.notify_all();
  }
  // Waits for open(), at most `timeout` (a test never hangs).
  bool pass(Millis timeout = Millis(20000)) {
    std::unique_lock<std::mutex> lk(mu_);
    return cv_.wait_for(lk, timeout, [&] { return open_; });
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool open_ = false;
};

// Collectives on the device's stream, over a communicator of their own (as
// NCCL's is its own): each is enqueued as one stream operation.
class QueuedCollectives final : public StreamCollectives {
 public:
  QueuedCollectives(CpuDevice& d, comm::Communicator& comm, Gate* hold = nullptr)
      : device_(d), comm_(comm), hold_(hold) {}
  bool serves(const Device& d) const override { return &d == &device_; }
  void allreduce(void* buffer, std::size_t count, comm::DataType dtype, comm::ReduceOp op, Stream s) override {
    ++calls;
    device_.enqueue(s, [=] {
      comm::AllreduceOptions o;
      o.output = buffer;
      o.count = count;
      o.dtype = dtype;
      o.op = op;
      comm::allreduce(comm_, o);
      if (hold_ != nullptr) hold_->pass();
    });
  }
  void broadcast(void* buffer, std::size_t count, comm::DataType dtype, int root, Stream s) override {
    ++calls;
    device_.enqueue(s, [=] {
      comm::BroadcastOptions o;
      o.buffer = buffer;
      o.count = count;
      o.dtype = dtype;
      o.root = root;
      comm::broadcast(comm_, o);
    });
  }
  void allgatherv(const void* input, void* output, const std::vector<std::size_t>& counts, Stream s) override {
    ++calls;
    device_.enqueue(s, [=] {
      comm::AllgathervOptions o;
      o.input = input;
      o.output = output;
      o.counts = counts;
      o.dtype = comm::DataType::kUInt8;
      comm::allgatherv(comm_, o);
    });
  }
  std::atomic<int> calls{0};

 private:
  CpuDevice& device_;
  comm::Communicator& comm_;
  Gate* hold_;
};

// Runs fn on `size` ranks, each with a CpuDevice and an engine; with
// `on_stream`, the engine's device collectives go through QueuedCollectives
// on a second world.
struct Rank {
  Engine& engine;
  CpuDevice& device;
  int rank;
  QueuedCollectives* queued;  // null when staged
};
void run_device_world(int size, EngineOptions o, bool on_stream, const std::function<void(Rank&)>& fn,
                      CpuDevice::Options dopt = {}, Millis timeout = Millis(20000), Gate* hold = nullptr) {
  auto store2 = comm::testing::test_store();
  run_gloo_world(size, timeout, [&](comm::GlooCommunicator& c) {
    CpuDevice device(dopt);
    std::unique_ptr<comm::GlooCommunicator> second;
    std::shared_ptr<QueuedCollectives> queued;
    EngineOptions eo = o;
    if (on_stream) {
      second = comm::GlooCommunicator::connect(comm::testing::gloo_options_for(c.rank(), size, store2, timeout));
      queued = std::make_shared<QueuedCollectives>(device, *second, hold);
      eo.stream_collectives = queued;
    }
    Engine e(c, eo, device_quiet(c.rank()));
    Rank r{e, device, c.rank(), queued.get()};
    fn(r);
    e.shutdown();
  });
}

// A device tensor whose values a producer stream writes late: `delay` after
// submission, the kernel writes value into every element.
struct DeviceTensor {
  std::vector<float> v;
  TensorRef ref;
};
DeviceTensor produce(CpuDevice& d, Stream producer, std::size_t n, float value, Millis delay) {
  DeviceTensor t;
  t.v.assign(n, 0.0f);
  float* p = t.v.data();
  d.enqueue(producer, [=] {
    std::this_thread::sleep_for(delay);
    for (std::size_t i = 0; i < n; ++i) p[i] = value + static_cast<float>(i % 5);
  });
  t.ref.data = p;
  t.ref.shape = {static_cast<std::int64_t>(n)};
  t.ref.device = &d;
  t.ref.ready = d.record(producer);
  t.ref.stream = producer;
  return t;
}

TEST(CpuDevice, EventsOrderStreams) {
  CpuDevice d;
  Stream a = d.new_stream(), b = d.new_stream();
  int x = 0;
  d.enqueue(a, [&] {
    std::this_thread::sleep_for(Millis(50));
    x = 7;
  });
  auto e = d.record(a);
  EXPECT_FALSE(e->query());
  d.wait(b, *e);
  int seen = -1;
  d.enqueue(b, [&] { seen = x; });
  ASSERT_TRUE(d.synchronize(b, Millis(5000)));
  EXPECT_EQ(seen, 7);
  EXPECT_TRUE(e->query());
  EXPECT_TRUE(e->synchronize(Millis(0)));
}

TEST(CpuDevice, SynchronizeIsBounded) {
  CpuDevice d;
  Gate gate;
  Stream s = d.new_stream();
  d.enqueue(s, [&] { gate.pass(); });
  const auto t0 = SteadyClock::now();
  EXPECT_FALSE(d.synchronize(s, Millis(100)));
  EXPECT_LT(SteadyClock::now() - t0, Millis(2000));
  auto e = d.record(s);
  EXPECT_FALSE(e->synchronize(Millis(50)));
  gate.open();
  EXPECT_TRUE(e->synchronize(Millis(5000)));
}

// The collective never reads a tensor before its readiness event: the
// producers write 100 ms after submission, and the sums are of the written
// values. Several tensors (one of them host memory) travel fused.
void check_late_producers(bool on_stream, Compression compression) {
  auto o = device_fast_options();
  o.compression = compression;
  run_device_world(2, o, on_stream, [&](Rank& r) {
    Stream producer = r.device.new_stream();
    for (int step = 0; step < 3; ++step) {
      std::vector<DeviceTensor> ts;
      for (int i = 0; i < 5; ++i) ts.push_back(produce(r.device, producer, 100 + 37 * i, r.rank + 1.0f, Millis(20)));
      std::vector<float> host(64, static_cast<float>(r.rank + 1));
      std::vector<Handle> hs;
      for (int i = 0; i < 5; ++i) {
        hs.push_back(r.engine.allreduce_async("d" + std::to_string(i), ts[i].ref, comm::ReduceOp::kSum));
      }
      if (!on_stream) {
        hs.push_back(r.engine.allreduce_async("h", {host.data(), comm::DataType::kFloat32, {64}, nullptr},
                                              comm::ReduceOp::kAvg));
      }
      for (auto& h : hs) h.wait();  // orders the producer stream after each completion
      std::vector<std::vector<float>> seen(5);
      r.device.enqueue(producer, [&] {
        for (int i = 0; i < 5; ++i) seen[i] = ts[i].v;
      });
      ASSERT_TRUE(r.device.synchronize(producer, Millis(10000)));
      for (int i = 0; i < 5; ++i) {
        for (std::size_t k = 0; k < seen[i].size(); ++k) {
          const float want = 3.0f + 2.0f * static_cast<float>(k % 5);
          ASSERT_NEAR(seen[i][k], want, compression == Compression::kNone ? 0.0f : 1e-2f)
              << "tensor " << i << " element " << k << " step " << step;
        }
      }
      if (!on_stream) {
        for (float x : host) ASSERT_EQ(x, 1.5f);
      }
    }
    auto st = r.engine.stats();
    EXPECT_GT(st.packed_bytes, 0u);
    // Fused: fewer collectives than tensors.
    EXPECT_LT(st.collectives, 3u * 5u);
    if (on_stream) {
      EXPECT_EQ(r.queued->calls.load(), static_cast<int>(st.collectives));
    }
    if (compression != Compression::kNone) {
      EXPECT_GT(st.compressed_collectives, 0u);
    }
  });
}

TEST(EngineDevice, StagedWaitsForReadinessAndFuses) { check_late_producers(false, Compression::kNone); }
TEST(EngineDevice, OnStreamWaitsForReadinessAndFuses) { check_late_producers(true, Compression::kNone); }
TEST(EngineDevice, Fp16StagedCastsOnTheHost) { check_late_producers(false, Compression::kFp16); }
TEST(EngineDevice, Bf16OnStreamCastsOnTheDevice) { check_late_producers(true, Compression::kBf16); }

// The consumer never sees the result before the completion event: the
// collective is held on the communication stream after the handle is done;
// a consumer that waited on the handle reads only after it is released.
TEST(EngineDevice, ConsumerWaitsForCompletion) {
  Gate hold;
  std::atomic<int> checked{0};
  run_device_world(
      2, device_fast_options(), true,
      [&](Rank& r) {
        Stream consumer = r.device.new_stream();
        auto t = produce(r.device, consumer, 50, r.rank + 1.0f, Millis(0));
        auto h = r.engine.allreduce_async("held", t.ref, comm::ReduceOp::kSum);
        h.wait_on(consumer);  // the host goes on: the collective is held
        ASSERT_TRUE(h.poll());
        ASSERT_NE(h.completion(), nullptr);
        EXPECT_FALSE(h.completion()->query());
        std::vector<float> seen;
        r.device.enqueue(consumer, [&] { seen = t.v; });
        std::this_thread::sleep_for(Millis(50));
        EXPECT_TRUE(seen.empty()) << "the consumer ran before the completion event";
        // The bounded host wait names the tensor while the result is held.
        try {
          h.wait(Millis(50));
          ADD_FAILURE() << "wait(timeout) returned while the result was held";
        } catch (const Error& e) {
          EXPECT_EQ(e.code(), ErrorCode::kTimeout);
          EXPECT_NE(std::string(e.what()).find("'held'"), std::string::npos) << e.what();
        }
        // Released once every rank has checked.
        ++checked;
        if (r.rank == 0) {
          const auto until = SteadyClock::now() + Millis(10000);
          while (checked.load() < 2 && SteadyClock::now() < until) std::this_thread::sleep_for(Millis(1));
          hold.open();
        }
        h.wait(Millis(10000));  // the host now waits for the result itself
        ASSERT_TRUE(r.device.synchronize(consumer, Millis(10000)));
        for (std::size_t k = 0; k < seen.size(); ++k) ASSERT_EQ(seen[k], 3.0f + 2.0f * static_cast<float>(k % 5));
        EXPECT_EQ(seen.size(), 50u);
      },
      {}, Millis(20000), &hold);
}

TEST(EngineDevice, BroadcastAndAllgather) {
  for (bool on_stream : {false, true}) {
    run_device_world(3, device_fast_options(), on_stream, [&](Rank& r) {
      Stream s = r.device.new_stream();
      auto b = produce(r.device, s, 10, r.rank == 1 ? 40.0f : -1.0f, Millis(20));
      auto hb = r.engine.broadcast_async("b", b.ref, 1);
      // Rank r contributes r+1 rows of 2 floats, written late.
      auto g = produce(r.device, s, static_cast<std::size_t>(2 * (r.rank + 1)), static_cast<float>(r.rank), Millis(20));
      g.ref.shape = {r.rank + 1, 2};
      std::vector<float> out;
      auto hg = r.engine.allgather_async("g", g.ref, [&](const std::vector<std::int64_t>& shape) {
        out.assign(static_cast<std::size_t>(shape[0] * shape[1]), -9.0f);
        return static_cast<void*>(out.data());
      });
      auto gh = produce(r.device, s, 2, static_cast<float>(r.rank), Millis(0));
      auto hh = r.engine.allgather_async("gh", gh.ref);
      hb.wait(Millis(10000));
      hg.wait(Millis(10000));
      hh.wait(Millis(10000));
      for (std::size_t k = 0; k < b.v.size(); ++k) ASSERT_EQ(b.v[k], 40.0f + static_cast<float>(k % 5));
      ASSERT_EQ(out.size(), 12u);
      std::size_t at = 0;
      for (int q = 0; q < 3; ++q) {
        for (int k = 0; k < 2 * (q + 1); ++k) ASSERT_EQ(out[at++], static_cast<float>(q + k % 5)) << at;
      }
      ASSERT_EQ(hh.gathered().size(), 3u * 2u * sizeof(float));
    });
  }
}

// A readiness event that never fires: the staged engine waits for its
// stream at most the communicator's timeout and fails the tensor by name.
TEST(EngineDevice, ReadinessThatNeverFiresIsBoundedAndNamed) {
  Gate never;
  const auto t0 = SteadyClock::now();
  std::atomic<int> named{0};
  run_device_world(
      2, device_fast_options(), false,
      [&](Rank& r) {
        Stream producer = r.device.new_stream();
        std::vector<float> v(16, 1.0f);
        if (r.rank == 0) r.device.enqueue(producer, [&] { never.pass(Millis(30000)); });
        TensorRef t{v.data(), comm::DataType::kFloat32, {16}, nullptr};
        t.device = &r.device;
        t.ready = r.device.record(producer);
        t.stream = producer;
        auto h = r.engine.allreduce_async("stuck/grad", t, comm::ReduceOp::kSum);
        try {
          h.wait(Millis(15000));
          ADD_FAILURE() << "rank " << r.rank << ": a tensor whose producer never finished was reduced";
        } catch (const Error& e) {
          if (std::string(e.what()).find("'stuck/grad'") != std::string::npos) ++named;
          EXPECT_NE(e.code(), ErrorCode::kInvalidArgument) << e.what();
        }
        if (r.rank == 0) never.open();  // lets the producer stream end
      },
      {}, Millis(1500));
  EXPECT_EQ(named.load(), 2);
  EXPECT_LT(SteadyClock::now() - t0, Millis(12000));
}

TEST(EngineDevice, TwoDevicesInOneGroupAreRefused) {
  EXPECT_THROW(
      run_device_world(1, device_fast_options(), false,
                       [&](Rank& r) {
                         CpuDevice other({1, Millis(0)});
                         std::vector<float> a(4, 1.0f), b(4, 1.0f);
                         TensorRef ta{a.data(), comm::DataType::kFloat32, {4}, nullptr};
                         TensorRef tb = ta;
                         tb.data = b.data();
                         ta.device = &r.device;
                         tb.device = &other;
                         auto ha = r.engine.allreduce_async("a", ta, comm::ReduceOp::kSum);
                         auto hb = r.engine.allreduce_async("b", tb, comm::ReduceOp::kSum);
                         ha.wait(Millis(10000));
                         hb.wait(Millis(10000));
                       }),
      Error);
}

// The hierarchical path's adapter: a blocking communicator behind the
// engine's stream collectives. The fused buffer is read only once the
// producers' late writes are in it (the stream is drained first), and the
// results reach the consumer.
TEST(EngineDevice, BlockingCollectivesDrainTheStreamFirst) {
  auto store2 = comm::testing::test_store();
  run_gloo_world(2, Millis(20000), [&](comm::GlooCommunicator& c) {
    CpuDevice device;
    std::shared_ptr<comm::Communicator> second =
        comm::GlooCommunicator::connect(comm::testing::gloo_options_for(c.rank(), 2, store2, Millis(20000)));
    EngineOptions eo = device_fast_options();
    eo.stream_collectives = std::make_shared<BlockingStreamCollectives>(second, device, Millis(20000));
    Engine e(c, eo, device_quiet(c.rank()));
    Stream producer = device.new_stream();
    std::vector<DeviceTensor> ts;
    std::vector<Handle> hs;
    for (int i = 0; i < 4; ++i) ts.push_back(produce(device, producer, 50 + 31 * i, c.rank() + 1.0f, Millis(30)));
    for (int i = 0; i < 4; ++i) {
      hs.push_back(e.allreduce_async("b" + std::to_string(i), ts[i].ref, comm::ReduceOp::kSum));
    }
    for (auto& h : hs) h.wait();
    ASSERT_TRUE(device.synchronize(producer, Millis(10000)));
    for (int i = 0; i < 4; ++i) {
      for (std::size_t k = 0; k < ts[i].v.size(); ++k) {
        ASSERT_EQ(ts[i].v[k], 3.0f + 2.0f * static_cast<float>(k % 5)) << "tensor " << i << " element " << k;
      }
    }
    EXPECT_LT(e.stats().collectives, 4u);  // fused
    e.shutdown();
  });
}

// A stream that never drains fails the operation within the bound, naming it.
TEST(EngineDevice, BlockingCollectivesBoundTheirWaitForTheStream) {
  run_gloo_world(1, Millis(20000), [&](comm::GlooCommunicator& c) {
    CpuDevice device;
    BlockingStreamCollectives bc(std::shared_ptr<comm::Communicator>(&c, [](comm::Communicator*) {}), device,
                                 Millis(200));
    Gate never;
    Stream s = device.new_stream();
    device.enqueue(s, [&] { never.pass(); });
    std::vector<float> v(8, 1.0f);
    const auto t0 = SteadyClock::now();
    try {
      bc.allreduce(v.data(), v.size(), comm::DataType::kFloat32, comm::ReduceOp::kSum, s);
      ADD_FAILURE() << "no timeout";
    } catch (const Error& err) {
      EXPECT_EQ(err.code(), ErrorCode::kTimeout);
      EXPECT_NE(std::string(err.what()).find("allreduce"), std::string::npos) << err.what();
    }
    EXPECT_LT(SteadyClock::now() - t0, Millis(5000));
    never.open();
    ASSERT_TRUE(device.synchronize(s, Millis(10000)));
  });
}

}  // namespace
}  // namespace hpct::engine
