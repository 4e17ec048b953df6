// The shared-memory allreduce with ranks as threads of this process (one
// segment, as between processes) and, for the dead-peer case, a forked child.
#include "comm/shm_allreduce.h"

#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "comm/reduce.h"
#include "core/error.h"

namespace hpct::comm {
namespace {

using Clock = std::chrono::steady_clock;

// Opens a segment for `size` ranks: element 0 is rank 0's (the creator).
std::vector<std::unique_ptr<ShmAllreduce>> open_all(int size, std::size_t slot_bytes) {
  std::vector<std::unique_ptr<ShmAllreduce>> ranks;
  ranks.push_back(ShmAllreduce::create(size, slot_bytes));
  for (int r = 1; r < size; ++r) {
    ranks.push_back(ShmAllreduce::open(ranks[0]->name(), r, size, slot_bytes));
  }
  ranks[0]->unlink();
  std::vector<pid_t> pids(static_cast<size_t>(size), ::getpid());
  for (auto& r : ranks) r->set_pids(pids);
  return ranks;
}

// Rank r's input: values every dtype holds exactly, different per rank and
// element, never zero (products stay informative).
std::vector<std::uint8_t> input_of(int rank, std::size_t count, DataType dtype) {
  std::vector<std::uint8_t> bytes(count * dtype_size(dtype));
  for (std::size_t i = 0; i < count; ++i) {
    const double v = static_cast<double>((i * 7 + static_cast<std::size_t>(rank) * 3) % 5 + 1) *
                     ((i + static_cast<std::size_t>(rank)) % 2 ? 1 : -1);
    void* p = bytes.data() + i * dtype_size(dtype);
    switch (dtype) {
      case DataType::kFloat32: *static_cast<float*>(p) = static_cast<float>(v); break;
      case DataType::kFloat64: *static_cast<double*>(p) = v; break;
      case DataType::kInt32: *static_cast<std::int32_t*>(p) = static_cast<std::int32_t>(v); break;
      case DataType::kInt64: *static_cast<std::int64_t*>(p) = static_cast<std::int64_t>(v); break;
      case DataType::kUInt8: *static_cast<std::uint8_t*>(p) = static_cast<std::uint8_t>(v + 6); break;
      case DataType::kInt8: *static_cast<std::int8_t*>(p) = static_cast<std::int8_t>(v); break;
      case DataType::kInt16: *static_cast<std::int16_t*>(p) = static_cast<std::int16_t>(v); break;
      case DataType::kFloat16: *static_cast<std::uint16_t*>(p) = float_to_half(static_cast<float>(v)); break;
      case DataType::kBFloat16:
        *static_cast<std::uint16_t*>(p) = float_to_bfloat16(static_cast<float>(v));
        break;
    }
  }
  return bytes;
}

// The serial reference: ranks folded in rank order, then the average.
std::vector<std::uint8_t> reference(int size, std::size_t count, DataType dtype, ReduceOp op) {
  std::vector<std::uint8_t> acc = input_of(0, count, dtype);
  for (int r = 1; r < size; ++r) {
    const auto x = input_of(r, count, dtype);
    reduce_elements(acc.data(), acc.data(), x.data(), count, dtype, op);
  }
  if (op == ReduceOp::kAvg && size > 1) finish_average(acc.data(), count, dtype, size);
  return acc;
}

struct Case {
  std::size_t count;
  DataType dtype;
  ReduceOp op;
  bool in_place;
};

std::vector<Case> all_cases() {
  std::vector<Case> cases;
  const DataType dtypes[] = {DataType::kFloat32, DataType::kFloat64, DataType::kInt32,
                             DataType::kInt64,   DataType::kFloat16, DataType::kBFloat16,
                             DataType::kUInt8,   DataType::kInt8,    DataType::kInt16};
  const ReduceOp ops[] = {ReduceOp::kSum, ReduceOp::kAvg, ReduceOp::kMin, ReduceOp::kMax,
                          ReduceOp::kProduct};
  // With 16 KiB slots a piece is 8 KiB: 5000 float32 spans three pieces,
  // 1 and 7 leave some ranks an empty chunk.
  for (std::size_t count : {std::size_t{0}, std::size_t{1}, std::size_t{7}, std::size_t{1000},
                            std::size_t{5000}}) {
    for (DataType d : dtypes) {
      for (ReduceOp op : ops) {
        for (bool in_place : {true, false}) cases.push_back({count, d, op, in_place});
      }
    }
  }
  return cases;
}

// For 1 to 4 ranks over slots of slot_bytes, runs body(rank, its
// ShmAllreduce) on a thread per rank and expects every rank to return ""
// (or what went wrong: a rank stops at its first failure, and the others
// then time out, so their failure is this one).
void expect_every_rank_count_ok(std::size_t slot_bytes,
                                const std::function<std::string(int, ShmAllreduce&)>& body) {
  for (int size = 1; size <= 4; ++size) {
    auto ranks = open_all(size, slot_bytes);
    std::vector<std::string> failures(static_cast<size_t>(size));
    std::vector<std::thread> threads;
    for (int r = 0; r < size; ++r) {
      threads.emplace_back([&, r] {
        try {
          failures[static_cast<size_t>(r)] = body(r, *ranks[static_cast<size_t>(r)]);
        } catch (const std::exception& e) {
          failures[static_cast<size_t>(r)] = e.what();
        }
      });
    }
    for (auto& t : threads) t.join();
    for (int r = 0; r < size; ++r) {
      EXPECT_EQ(failures[static_cast<size_t>(r)], "") << "size " << size << " rank " << r;
    }
  }
}

TEST(ShmAllreduce, EveryDtypeOpSizeAndRankCountMatchesTheSerialFold) {
  const auto cases = all_cases();
  expect_every_rank_count_ok(16 << 10, [&](int r, ShmAllreduce& me) -> std::string {
    const int size = me.size();
    for (const Case& c : cases) {
      const auto in = input_of(r, c.count, c.dtype);
      std::vector<std::uint8_t> out = in;
      std::vector<std::uint8_t> separate(in.size(), 0xEE);
      if (c.in_place) {
        me.allreduce(nullptr, out.data(), c.count, c.dtype, c.op, Deadline(Millis(20000)));
      } else {
        me.allreduce(in.data(), separate.data(), c.count, c.dtype, c.op, Deadline(Millis(20000)));
        out = separate;
      }
      if (out != reference(size, c.count, c.dtype, c.op)) {
        return std::string("wrong result for ") + std::to_string(c.count) + " " + dtype_name(c.dtype) +
               " " + reduce_op_name(c.op) + (c.in_place ? " in place" : " out of place");
      }
    }
    return "";
  });
}

TEST(ShmAllreduce, LargeBufferAcrossManyPiecesWithDefaultSlots) {
  auto ranks = open_all(2, 2 << 20);
  const std::size_t n = (5u << 20) + 3;  // 20 MiB of float32: 20 pieces and a tail
  std::vector<std::vector<float>> data(2);
  for (int r = 0; r < 2; ++r) {
    data[static_cast<size_t>(r)].resize(n);
    for (std::size_t i = 0; i < n; ++i) data[static_cast<size_t>(r)][i] = static_cast<float>(i % 1000) + r;
  }
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r) {
    threads.emplace_back([&, r] {
      ranks[static_cast<size_t>(r)]->allreduce(nullptr, data[static_cast<size_t>(r)].data(), n,
                                               DataType::kFloat32, ReduceOp::kAvg,
                                               Deadline(Millis(20000)));
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(data[0], data[1]) << "ranks must end bitwise identical";
  for (std::size_t i = 0; i < n; i += 4099) {
    ASSERT_EQ(data[0][i], static_cast<float>(i % 1000) + 0.5f) << "element " << i;
  }
  EXPECT_EQ(data[0][n - 1], static_cast<float>((n - 1) % 1000) + 0.5f);
}

// Slot stores kept plain or forced non-temporal (HPCT_SHM_STREAM, read
// when a rank maps the segment): pieces of 256 KiB and more go through the
// non-temporal copies and sums, whose stores are fenced once per step before
// the arrival that publishes them. Every rank must see every peer's bytes:
// the same bits as the serial fold, over many pieces, in place and as
// segments, for two to four ranks.
TEST(ShmAllreduce, PlainAndNonTemporalSlotStoresGiveTheSerialFoldsBits) {
  // 4 MiB of float32 and 5 more: 9 pieces of 455 KiB (streamed from 256 KiB).
  const std::size_t count = (4u << 20) / 4 + 5;
  for (const char* setting : {"0", "1"}) {
    for (int size = 2; size <= 4; ++size) {
      ::setenv("HPCT_SHM_STREAM", setting, 1);
      auto ranks = open_all(size, 1 << 20);
      ::unsetenv("HPCT_SHM_STREAM");
      const std::vector<std::uint8_t> expected[] = {
          reference(size, count, DataType::kFloat32, ReduceOp::kSum),
          reference(size, count, DataType::kFloat32, ReduceOp::kAvg)};
      std::vector<std::string> failures(static_cast<size_t>(size));
      std::vector<std::thread> threads;
      for (int r = 0; r < size; ++r) {
        threads.emplace_back([&, r] {
          auto& me = *ranks[static_cast<size_t>(r)];
          for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAvg}) {
            for (int round = 0; round < 3; ++round) {
              auto data = input_of(r, count, DataType::kFloat32);
              if (round == 2) {  // as segments that split pieces
                const std::size_t cut = count / 3 + 1;
                std::vector<BufferSegment> segs = {
                    {data.data(), cut}, {data.data() + cut * 4, count - cut}};
                me.allreduce(segs, DataType::kFloat32, op, Deadline(Millis(20000)));
              } else {
                me.allreduce(nullptr, data.data(), count, DataType::kFloat32, op,
                             Deadline(Millis(20000)));
              }
              if (data != expected[op == ReduceOp::kSum ? 0 : 1]) {
                failures[static_cast<size_t>(r)] = std::string("differs from the serial fold: ") +
                                                   reduce_op_name(op) + " round " +
                                                   std::to_string(round);
                return;
              }
            }
          }
        });
      }
      for (auto& t : threads) t.join();
      for (int r = 0; r < size; ++r) {
        EXPECT_EQ(failures[static_cast<size_t>(r)], "")
            << "HPCT_SHM_STREAM=" << setting << " size " << size << " rank " << r;
      }
    }
  }
}

// Segments (empty ones, ones that cross piece and block bounds) give the
// bits of the same allreduce over their concatenation.
TEST(ShmAllreduce, SegmentsGiveTheSameBitsAsTheirConcatenation) {
  for (int size : {2, 3}) {
    auto ranks = open_all(size, 16 << 10);
    const std::vector<std::size_t> sizes = {0, 1, 3000, 0, 17, 5000, 4096, 2, 0, 777};
    std::size_t total = 0;
    for (auto n : sizes) total += n;
    for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAvg, ReduceOp::kMax}) {
      std::vector<std::vector<float>> flat(static_cast<size_t>(size));
      std::vector<std::vector<std::vector<float>>> parts(static_cast<size_t>(size));
      for (int r = 0; r < size; ++r) {
        const auto bytes = input_of(r, total, DataType::kFloat32);
        flat[r].resize(total);
        std::memcpy(flat[r].data(), bytes.data(), bytes.size());
        std::size_t at = 0;
        for (auto n : sizes) {
          parts[r].emplace_back(flat[r].begin() + static_cast<std::ptrdiff_t>(at),
                                flat[r].begin() + static_cast<std::ptrdiff_t>(at + n));
          at += n;
        }
      }
      std::vector<std::thread> threads;
      for (int r = 0; r < size; ++r) {
        threads.emplace_back([&, r] {
          auto& me = *ranks[static_cast<size_t>(r)];
          me.allreduce(nullptr, flat[r].data(), total, DataType::kFloat32, op, Deadline(Millis(20000)));
          std::vector<BufferSegment> segs;
          for (auto& p : parts[r]) segs.push_back({p.data(), p.size()});
          me.allreduce(segs, DataType::kFloat32, op, Deadline(Millis(20000)));
        });
      }
      for (auto& t : threads) t.join();
      for (int r = 0; r < size; ++r) {
        std::vector<float> joined;
        for (auto& p : parts[r]) joined.insert(joined.end(), p.begin(), p.end());
        EXPECT_EQ(std::memcmp(joined.data(), flat[r].data(), total * sizeof(float)), 0)
            << "size " << size << " rank " << r << " " << reduce_op_name(op);
      }
    }
  }
}

// With 64 KiB slots a piece is 32 KiB: these counts cross the 16 KiB
// reduction blocks, the pieces and the slot (16384 float32 fill it, 16385
// do not), in every dtype width, in place, out of place and as segments
// that split blocks and pieces, for one to four ranks.
TEST(ShmAllreduce, CountsAcrossBlocksAndPiecesMatchTheSerialFoldForOneToFourRanks) {
  const std::size_t counts[] = {4095, 4096, 4097, 16384, 16385, 3 * 8192 + 1};
  const DataType dtypes[] = {DataType::kFloat32, DataType::kFloat64, DataType::kFloat16,
                             DataType::kInt8};
  expect_every_rank_count_ok(64 << 10, [&](int r, ShmAllreduce& me) -> std::string {
    for (std::size_t count : counts) {
      for (DataType d : dtypes) {
        for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAvg, ReduceOp::kMax}) {
          const auto want = reference(me.size(), count, d, op);
          const auto in = input_of(r, count, d);
          const std::size_t es = dtype_size(d);
          std::vector<std::uint8_t> in_place = in;
          std::vector<std::uint8_t> separate(in.size(), 0xEE);
          // Segments: a sliver, an odd run across a block, the rest.
          std::vector<std::uint8_t> segmented = in;
          const std::size_t cut1 = 3, cut2 = std::min(count, cut1 + 4099);
          std::vector<BufferSegment> segs = {{segmented.data(), cut1},
                                             {segmented.data() + cut1 * es, cut2 - cut1},
                                             {segmented.data() + cut2 * es, count - cut2}};
          me.allreduce(nullptr, in_place.data(), count, d, op, Deadline(Millis(20000)));
          me.allreduce(in.data(), separate.data(), count, d, op, Deadline(Millis(20000)));
          me.allreduce(segs, d, op, Deadline(Millis(20000)));
          const std::string what = std::to_string(count) + " " + dtype_name(d) + " " + reduce_op_name(op);
          if (in_place != want) return "in place: " + what;
          if (separate != want) return "out of place: " + what;
          if (segmented != want) return "segments: " + what;
        }
      }
    }
    return "";
  });
}

TEST(ShmAllreduce, AbsentPeerTimesOutNamingItWithinTheBound) {
  auto ranks = open_all(2, 16 << 10);
  std::vector<float> x(1000, 1.0f);
  const auto t0 = Clock::now();
  try {
    ranks[0]->allreduce(nullptr, x.data(), x.size(), DataType::kFloat32, ReduceOp::kSum,
                        Deadline(Millis(300)));
    FAIL() << "allreduce without its peer returned";
  } catch (const Error& e) {
    const auto waited =
        std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - t0).count();
    EXPECT_EQ(e.code(), ErrorCode::kTimeout);
    EXPECT_NE(std::string(e.what()).find("waiting for rank 1"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("1000 float32"), std::string::npos) << e.what();
    EXPECT_GE(waited, 300);
    EXPECT_LT(waited, 1300);
  }
}

// The cache-line probe the allreduce uses to choose its slot stores: two
// ranks that both take part get a round trip; a rank alone, or a world
// that is not two ranks, gets no verdict, within the probe's bound.
TEST(ShmAllreduce, TwoRanksTimeTheirCacheLineRoundTripAndALoneRankGivesUpAtOnce) {
  auto ranks = open_all(2, 16 << 10);
  for (int round = 0; round < 3; ++round) {
    double rt[2] = {-2, -2};
    std::thread peer([&] { rt[1] = ranks[1]->probe_round_trip(); });
    rt[0] = ranks[0]->probe_round_trip();
    peer.join();
    // Both took part: a round trip each (on one CPU they may also miss each
    // other, and then both say so).
    if (rt[0] >= 0 || rt[1] >= 0) {
      EXPECT_GT(rt[0], 0) << "round " << round;
      EXPECT_GT(rt[1], 0) << "round " << round;
      EXPECT_LT(rt[0], 200e3);
    }
  }
  const auto t0 = Clock::now();
  EXPECT_EQ(ranks[0]->probe_round_trip(), -1);  // rank 1 is not there
  EXPECT_LT(Clock::now() - t0, std::chrono::milliseconds(50));
  auto three = open_all(3, 16 << 10);
  EXPECT_EQ(three[0]->probe_round_trip(), -1);
}

TEST(ShmAllreduce, DeadPeerIsNamedLongBeforeTheDeadline) {
  auto r0 = ShmAllreduce::create(2, 16 << 10);
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    // The peer maps the segment, then dies without arriving.
    try {
      auto r1 = ShmAllreduce::open(r0->name(), 1, 2, 16 << 10);
      ::usleep(200 * 1000);
    } catch (...) {
    }
    ::_exit(0);
  }
  r0->set_pids({::getpid(), child});
  std::vector<float> x(1000, 1.0f);
  const auto t0 = Clock::now();
  try {
    r0->allreduce(nullptr, x.data(), x.size(), DataType::kFloat32, ReduceOp::kSum,
                  Deadline(Millis(20000)));
    ADD_FAILURE() << "allreduce with a dead peer returned";
  } catch (const Error& e) {
    const auto waited =
        std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - t0).count();
    EXPECT_EQ(e.code(), ErrorCode::kPeerFailure) << e.what();
    EXPECT_NE(std::string(e.what()).find("rank 1 (pid " + std::to_string(child) + ") exited"),
              std::string::npos)
        << e.what();
    EXPECT_LT(waited, 2000);
  }
  int status = 0;
  ::waitpid(child, &status, 0);
}

TEST(ShmAllreduce, SegmentIsGoneFromDevShmOnceUnlinkedAndSizesMustMatch) {
  auto r0 = ShmAllreduce::create(2, 16 << 10);
  const std::string name = r0->name();
  EXPECT_THROW(ShmAllreduce::open(name, 1, 3, 16 << 10), Error);  // made for 2 ranks
  try {
    ShmAllreduce::open(name, 1, 2, 32 << 10);
    ADD_FAILURE() << "open with another slot size succeeded";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kMismatch);
    EXPECT_NE(std::string(e.what()).find("HPCT_SHM_SLOT_BYTES"), std::string::npos) << e.what();
  }
  r0->unlink();
  EXPECT_NE(::access(("/dev/shm" + name).c_str(), F_OK), 0) << name << " left in /dev/shm";
  try {
    ShmAllreduce::open(name, 1, 2, 16 << 10);
    ADD_FAILURE() << "open after unlink succeeded";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kIo);
    EXPECT_NE(std::string(e.what()).find(name), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace hpct::comm
