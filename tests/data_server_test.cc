// The data server with real sockets in one process: clients get exactly what
// a local Loader would give their rank; a server killed and restarted
// mid-epoch costs no sample and repeats none; a wrong secret is refused;
// the send queue stays bounded.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <map>
#include <thread>

#include "core/error.h"
#include "data/source/data_client.h"
#include "data/serve/data_server.h"
#include "data/loader.h"
#include "data/shard_index.h"
#include "data/test_files.h"

namespace hpct::data {
namespace {

const std::string kSecret = "data-server-test-secret";

struct Fixture {
  testing::TempDir dir;
  std::vector<std::string> shards;
};
const Fixture& fixture() {
  static Fixture* f = [] {
    auto* f = new Fixture;
    f->shards = testing::write_mnist_shards(f->dir.path(), 300, 50);
    return f;
  }();
  return *f;
}

DataServerOptions server_options(int port = 0, bool decode = false) {
  DataServerOptions o;
  o.shards = fixture().shards;
  o.secret = kSecret;
  o.port = port;
  o.decode = decode;
  o.chunk_samples = 8;
  o.queue_chunks = 2;
  return o;
}

LoaderOptions loader_options(int rank, int size, const std::string& source) {
  LoaderOptions o;
  o.shards = {source};
  o.secret = kSecret;
  o.rank = rank;
  o.size = size;
  o.seed = 5;
  o.batch_size = 10;
  o.shuffle_buffer = 40;
  o.shuffle_initial = 10;
  o.timeout = Millis(30000);
  o.connect_timeout = Millis(2000);
  return o;
}

std::vector<Batch> read_epoch(Loader& l) {
  std::vector<Batch> out;
  Batch b;
  while (l.next(&b)) out.push_back(b);
  return out;
}

TEST(DataServer, TwoClientsGetWhatTheLocalLoaderGives) {
  for (bool decode : {false, true}) {
    SCOPED_TRACE(decode ? "decode" : "raw");
    DataServer server(server_options(0, decode));
    const std::string source = "tcp://127.0.0.1:" + std::to_string(server.port());
    std::vector<std::vector<Batch>> remote(2), local(2);
    std::vector<std::thread> ranks;
    for (int r = 0; r < 2; ++r) {
      ranks.emplace_back([&, r] {
        Loader net(loader_options(r, 2, source));
        net.start_epoch(3);
        remote[r] = read_epoch(net);
        auto lo = loader_options(r, 2, "");
        lo.shards = fixture().shards;
        Loader disk(lo);
        disk.start_epoch(3);
        local[r] = read_epoch(disk);
      });
    }
    for (auto& t : ranks) t.join();
    std::map<std::string, int> seen;
    for (int r = 0; r < 2; ++r) {
      ASSERT_EQ(remote[r].size(), local[r].size());
      ASSERT_EQ(remote[r].size(), 15u);  // 150 samples per rank in batches of 10
      for (size_t i = 0; i < remote[r].size(); ++i) {
        EXPECT_EQ(remote[r][i].keys, local[r][i].keys);
        EXPECT_TRUE(at::equal(remote[r][i].images, local[r][i].images));
        EXPECT_TRUE(at::equal(remote[r][i].labels, local[r][i].labels));
        for (auto& k : remote[r][i].keys) ++seen[k];
      }
    }
    EXPECT_EQ(seen.size(), 300u);
    // The server counts a stream finished after its End frame is sent,
    // which the client may see first: poll, bounded. At least both clients'
    // streams; more when a client on a loaded machine gave up on a slow
    // first handshake and opened its stream again (the abandoned one may
    // still have fitted into the socket buffers and ended).
    for (int i = 0; i < 250 && server.stats().streams_finished < 2; ++i) {
      std::this_thread::sleep_for(Millis(20));
    }
    EXPECT_GE(server.stats().streams_finished, 2u);
    EXPECT_LE(server.stats().largest_queue, 2u) << "the send queue is bounded";
  }
}

TEST(DataServer, ServerKilledAndRestartedMidEpochLosesAndRepeatsNothing) {
  auto server = std::make_unique<DataServer>(server_options());
  const int port = server->port();
  DataClientOptions co;
  co.port = port;
  co.secret = kSecret;
  co.request.rank = 1;
  co.request.size = 2;
  co.request.seed = 5;
  co.request.epoch = 1;
  co.request.shuffle_buffer = 40;
  co.request.shuffle_initial = 10;
  co.connect_timeout = Millis(1000);
  co.max_reconnects = 20;

  // The uninterrupted stream, for comparison.
  std::vector<std::string> expected;
  {
    DataClient c(co, 0);
    while (auto s = c.next()) expected.push_back(s->key);
  }
  ASSERT_EQ(expected.size(), 150u);

  DataClient c(co, 0);
  std::vector<std::string> got;
  while (got.size() < 37) got.push_back(c.next()->key);
  server.reset();  // the server dies mid-epoch, with samples in flight
  std::thread restart([&] {
    std::this_thread::sleep_for(Millis(300));
    server = std::make_unique<DataServer>(server_options(port));
  });
  while (auto s = c.next()) got.push_back(s->key);
  restart.join();
  EXPECT_EQ(got, expected);
  EXPECT_GE(c.reconnects(), 1u);
}

TEST(DataServer, GivesUpAfterBoundedRetriesAndRefusesAWrongSecret) {
  DataClientOptions co;
  co.secret = kSecret;
  co.connect_timeout = Millis(200);
  co.max_reconnects = 2;
  {
    DataServer server(server_options());
    co.port = server.port();
    auto wrong = co;
    wrong.secret = "not the secret";
    try {
      DataClient c(wrong, 0);
      FAIL() << "a wrong secret was accepted";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kAuth) << e.what();
    }
    auto bad_rank = co;
    bad_rank.request.rank = 5;
    bad_rank.request.size = 2;
    EXPECT_THROW(DataClient(bad_rank, 0), Error);
  }
  // No server on the port any more: bounded retries, then PeerFailure or Timeout.
  const auto t0 = SteadyClock::now();
  try {
    DataClient c(co, 0);
    FAIL() << "connected to nothing";
  } catch (const Error& e) {
    EXPECT_TRUE(e.code() == ErrorCode::kPeerFailure || e.code() == ErrorCode::kTimeout) << e.what();
  }
  EXPECT_LT(SteadyClock::now() - t0, std::chrono::seconds(5));
}

}  // namespace
}  // namespace hpct::data
