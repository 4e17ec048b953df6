// DirectMesh on loopback, ranks as threads meeting through a MemoryStore:
// sums over 1-5 ranks (powers of two and the fold) and over 3-5 ranks by the
// ring, min/max with NaN give
// the same bits on every rank, a stranger without the job's token is
// dropped, and a closed peer or a silent one fails the others, named and
// bounded. (Every dtype, op and size also runs through GlooCommunicator's
// checks, comm_gloo_test.)
#include "comm/direct_mesh.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <chrono>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <sstream>
#include <thread>
#include <vector>

#include "store/memory_store.h"

namespace hpct::comm {
namespace {

using namespace std::chrono_literals;

DirectMeshOptions options(int rank, int size, const std::shared_ptr<store::Store>& store,
                          Millis timeout = 10s) {
  DirectMeshOptions o;
  o.rank = rank;
  o.size = size;
  o.store = store;
  o.ip = "127.0.0.1";
  o.timeout = timeout;
  return o;
}

std::vector<std::unique_ptr<DirectMesh>> connect_all(int size,
                                                     const std::shared_ptr<store::Store>& store,
                                                     std::size_t ring_from_bytes = SIZE_MAX) {
  std::vector<std::unique_ptr<DirectMesh>> meshes(size);
  std::vector<std::thread> threads;
  for (int r = 0; r < size; ++r) {
    threads.emplace_back([&, r] {
      DirectMeshOptions o = options(r, size, store);
      o.ring_from_bytes = ring_from_bytes;
      meshes[r] = DirectMesh::connect(o);
    });
  }
  for (auto& t : threads) t.join();
  return meshes;
}

void on_every_rank(int size, const std::function<void(int)>& fn) {
  std::vector<std::thread> threads;
  for (int r = 0; r < size; ++r) threads.emplace_back(fn, r);
  for (auto& t : threads) t.join();
}

TEST(DirectMesh, SumsOverOneToFiveRanks) {
  for (int size = 1; size <= 5; ++size) {
    auto meshes = connect_all(size, std::make_shared<store::MemoryStore>());
    std::vector<std::vector<std::int64_t>> data(size, std::vector<std::int64_t>(1001));
    on_every_rank(size, [&](int r) {
      for (std::size_t i = 0; i < data[r].size(); ++i)
        data[r][i] = (r + 1) * 1000 + static_cast<std::int64_t>(i);
      meshes[r]->allreduce(data[r].data(), data[r].size(), DataType::kInt64, ReduceOp::kSum,
                           Deadline(10s));
    });
    for (int r = 0; r < size; ++r) {
      for (std::size_t i = 0; i < data[r].size(); ++i) {
        const std::int64_t want =
            1000 * size * (size + 1) / 2 + size * static_cast<std::int64_t>(i);
        ASSERT_EQ(data[r][i], want) << "size " << size << " rank " << r << " element " << i;
      }
    }
  }
}

// The ring (ring_from_bytes = 1: every size of 3 ranks or more): chunks of
// uneven length, fewer elements than ranks, and a buffer of several 256 KiB
// pieces per chunk, so the reduction runs while the bytes arrive.
TEST(DirectMesh, RingSumsOverThreeToFiveRanksWithUnevenChunks) {
  for (int size = 3; size <= 5; ++size) {
    auto meshes = connect_all(size, std::make_shared<store::MemoryStore>(), 1);
    for (std::size_t count : {std::size_t{1}, std::size_t{2}, std::size_t{1001},
                              std::size_t{600007}}) {
      std::vector<std::vector<std::int64_t>> data(size, std::vector<std::int64_t>(count));
      on_every_rank(size, [&](int r) {
        for (std::size_t i = 0; i < count; ++i)
          data[r][i] = (r + 1) * 1000 + static_cast<std::int64_t>(i);
        meshes[r]->allreduce(data[r].data(), count, DataType::kInt64, ReduceOp::kSum,
                             Deadline(20s));
      });
      for (int r = 0; r < size; ++r) {
        for (std::size_t i = 0; i < count; ++i) {
          const std::int64_t want =
              1000 * size * (size + 1) / 2 + size * static_cast<std::int64_t>(i);
          ASSERT_EQ(data[r][i], want)
              << "size " << size << " count " << count << " rank " << r << " element " << i;
        }
      }
    }
  }
}

TEST(DirectMesh, MinMaxWithNanGiveTheSameBitsOnEveryRank) {
  for (std::size_t ring_from : {SIZE_MAX, std::size_t{1}}) {  // doubling, then the ring
    for (ReduceOp op : {ReduceOp::kMin, ReduceOp::kMax, ReduceOp::kAvg}) {
      const int size = 3;
      auto meshes = connect_all(size, std::make_shared<store::MemoryStore>(), ring_from);
      std::vector<std::vector<float>> data(size, std::vector<float>(64));
      on_every_rank(size, [&](int r) {
        for (std::size_t i = 0; i < 64; ++i) {
          data[r][i] = (i + r) % 4 == 0 ? std::numeric_limits<float>::quiet_NaN()
                                        : 0.1f * static_cast<float>(i * (r + 1));
        }
        meshes[r]->allreduce(data[r].data(), 64, DataType::kFloat32, op, Deadline(10s));
      });
      for (int r = 1; r < size; ++r) {
        EXPECT_EQ(std::memcmp(data[0].data(), data[r].data(), 64 * sizeof(float)), 0)
            << reduce_op_name(op) << (ring_from == 1 ? " (ring)" : "") << ": rank " << r
            << " differs from rank 0";
      }
    }
  }
}

TEST(DirectMesh, AStrangerWithoutTheTokenIsDropped) {
  auto store = std::make_shared<store::MemoryStore>();
  std::unique_ptr<DirectMesh> rank0, rank1;
  std::thread t0([&] { rank0 = DirectMesh::connect(options(0, 2, store)); });
  // The stranger knows rank 0's address but not the token.
  std::istringstream is(store->get("hpct/direct/addr/0", 10s));
  std::string ip;
  int port = 0;
  is >> ip >> port;
  int s = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<std::uint16_t>(port));
  ::inet_pton(AF_INET, ip.c_str(), &a.sin_addr);
  ASSERT_EQ(::connect(s, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  char hello[36] = {1, 0, 0, 0};
  std::memset(hello + 4, 'x', 32);
  ASSERT_EQ(::send(s, hello, sizeof hello, 0), 36);
  std::thread t1([&] { rank1 = DirectMesh::connect(options(1, 2, store)); });
  t0.join();
  t1.join();
  std::int32_t x0 = 5, x1 = 7;
  std::thread r0(
      [&] { rank0->allreduce(&x0, 1, DataType::kInt32, ReduceOp::kSum, Deadline(10s)); });
  rank1->allreduce(&x1, 1, DataType::kInt32, ReduceOp::kSum, Deadline(10s));
  r0.join();
  EXPECT_EQ(x0, 12);
  EXPECT_EQ(x1, 12);
  ::close(s);
}

// One float allreduce on `mesh` that must fail: checks the error's code and
// peer, returns how long it took.
std::chrono::steady_clock::duration expect_link_error(DirectMesh& mesh, Millis budget,
                                                      ErrorCode code, int peer) {
  float x = 1;
  const auto start = std::chrono::steady_clock::now();
  try {
    mesh.allreduce(&x, 1, DataType::kFloat32, ReduceOp::kSum, Deadline(budget));
    ADD_FAILURE() << "no error";
  } catch (const DirectLinkError& e) {
    EXPECT_EQ(e.code(), code) << e.what();
    EXPECT_EQ(e.peer(), peer) << e.what();
    EXPECT_NE(std::string(e.what()).find("rank " + std::to_string(peer)), std::string::npos)
        << e.what();
  }
  return std::chrono::steady_clock::now() - start;
}

TEST(DirectMesh, ClosedPeerIsPeerFailureNamingIt) {
  auto meshes = connect_all(2, std::make_shared<store::MemoryStore>());
  meshes[1]->close();
  EXPECT_LT(expect_link_error(*meshes[0], 10s, ErrorCode::kPeerFailure, 1), 2s);
}

TEST(DirectMesh, SilentPeerTimesOutNamingIt) {
  auto meshes = connect_all(2, std::make_shared<store::MemoryStore>());
  const auto took = expect_link_error(*meshes[1], 300ms, ErrorCode::kTimeout, 0);
  EXPECT_GE(took, 250ms);
  EXPECT_LT(took, 3s);
}

TEST(DirectMesh, RankThatNeverConnectsIsNamed) {
  auto store = std::make_shared<store::MemoryStore>();
  std::string message;
  std::thread t([&] {
    try {
      DirectMesh::connect(options(0, 3, store, 500ms));  // ranks 1 and 2 never come
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kTimeout);
      message = e.what();
    }
  });
  t.join();
  EXPECT_NE(message.find("ranks [1, 2] did not connect"), std::string::npos) << message;
}

}  // namespace
}  // namespace hpct::comm
