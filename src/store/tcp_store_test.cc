#include "store/tcp_store.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <thread>

#include "core/error.h"
#include "core/fd.h"
#include "net/auth.h"
#include "net/frame.h"
#include "net/socket.h"
#include "store/secret.h"

namespace hpct::store {
namespace {

const std::string kSecret = "0123456789abcdef-test-secret";

Logger quiet() {
  return Logger(LogLevel::kError, "all", -1, [](const std::string&) {});
}

TcpStoreServerOptions server_options() {
  TcpStoreServerOptions o;
  o.secret = kSecret;
  o.handshake_timeout = Millis(300);
  o.io_timeout = Millis(300);
  o.logger = quiet();
  return o;
}

TcpStoreOptions client_options(int port, std::string secret = kSecret) {
  TcpStoreOptions o;
  o.port = port;
  o.secret = std::move(secret);
  o.connect_timeout = Millis(3000);
  o.io_timeout = Millis(3000);
  return o;
}

UniqueFd raw_connect(int port) {
  UniqueFd fd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  EXPECT_TRUE(fd.valid());
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  EXPECT_EQ(::connect(fd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
  return fd;
}

void send_raw(int fd, const std::string& bytes) {
  net::write_all(fd, bytes.data(), bytes.size(), SteadyClock::now() + Millis(2000), -1,
                  "test server");
}

// True when the server closes fd within `within` (reading and discarding
// whatever it sends first, e.g. a handshake reply).
bool closed_by_server(int fd, Millis within) {
  const auto until = SteadyClock::now() + within;
  char buf[256];
  while (SteadyClock::now() < until) {
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, 50) <= 0) continue;
    ssize_t n = ::recv(fd, buf, sizeof buf, MSG_DONTWAIT);
    if (n == 0 || (n < 0 && errno == ECONNRESET)) return true;
  }
  return false;
}

// A raw client that completed the handshake; tests then misbehave on it.
struct RawSession {
  explicit RawSession(int port, std::string secret = kSecret) : fd(raw_connect(port)) {
    key =
        net::client_handshake(fd.get(), secret, SteadyClock::now() + Millis(2000), "test server");
  }
  UniqueFd fd;
  net::Mac key;
};

std::string set_request(const std::string& key, const std::string& value) {
  tcp_wire::Message m;
  m.kind = static_cast<std::uint8_t>(tcp_wire::Op::kSet);
  m.keys = {key};
  m.value = value;
  return tcp_wire::encode(m);
}

// A good client must still be served: a round trip through a fresh TcpStore.
void expect_serves_good_clients(int port) {
  TcpStore good(client_options(port));
  good.set("still-ok", "yes");
  EXPECT_EQ(good.get("still-ok", Millis(1000)), "yes");
}

TEST(TcpStore, SetGetAddWaitCheckRemove) {
  TcpStoreServer server(server_options());
  EXPECT_EQ(server.bind_address(), "127.0.0.1");
  ASSERT_GT(server.port(), 0);
  TcpStore a(client_options(server.port()));
  TcpStore b(client_options(server.port()));
  const std::string binary_key("k/\0\xff", 4), binary_value("v\0\n\xfe", 4);
  a.set(binary_key, binary_value);
  EXPECT_EQ(b.get(binary_key, Millis(1000)), binary_value);
  const std::string big(1 << 20, 'x');
  a.set("big", big);
  EXPECT_EQ(b.get("big", Millis(1000)), big);
  EXPECT_EQ(a.add("n", 5), 5);
  EXPECT_EQ(b.add("n", -7), -2);
  b.wait({binary_key, "n"}, Millis(1000));
  EXPECT_TRUE(a.check({binary_key, "n"}));
  EXPECT_FALSE(a.check({binary_key, "absent"}));
  EXPECT_TRUE(b.remove("n"));
  EXPECT_FALSE(b.remove("n"));
  a.set("text", "abc");
  try {
    a.add("text", 1);
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument) << e.what();
  }
  EXPECT_EQ(a.add("n", 1), 1);  // the connection survived the error reply
}

TEST(TcpStore, GetBlocksUntilAnotherClientSetsWhileOthersAreServed) {
  TcpStoreServer server(server_options());
  TcpStore waiter(client_options(server.port()));
  std::thread t([&] { EXPECT_EQ(waiter.get("late", Millis(5000)), "v"); });
  TcpStore other(client_options(server.port()));
  std::this_thread::sleep_for(Millis(50));
  // Served while the waiter blocks; the waiter's own store too (pooled).
  for (int i = 0; i < 20; ++i) other.add("count", 1);
  waiter.set("from-waiter-store", "1");
  other.set("late", "v");
  t.join();
  EXPECT_EQ(other.add("count", 0), 20);
}

TEST(TcpStore, WaitTimeoutNamesMissingKeys) {
  TcpStoreServer server(server_options());
  TcpStore s(client_options(server.port()));
  s.set("here", "1");
  const auto start = SteadyClock::now();
  try {
    s.wait({"here", "absent1", "absent2"}, Millis(200));
    FAIL() << "no timeout";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kTimeout);
    const std::string msg = e.what();
    EXPECT_NE(msg.find("missing: absent1, absent2"), std::string::npos) << msg;
    EXPECT_NE(msg.find("127.0.0.1:" + std::to_string(server.port())), std::string::npos) << msg;
  }
  const auto took = SteadyClock::now() - start;
  EXPECT_GE(took, Millis(200));
  EXPECT_LT(took, Millis(2000));
  try {
    s.get("nope", Millis(50));
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kTimeout);
    EXPECT_NE(std::string(e.what()).find("missing: nope"), std::string::npos) << e.what();
  }
}

TEST(TcpStore, ConcurrentAddsReachTheExactTotal) {
  TcpStoreServer server(server_options());
  constexpr int kClients = 12, kThreadsOnShared = 4, kAdds = 100;
  TcpStore shared(client_options(server.port()));
  std::vector<std::thread> threads;
  std::atomic<int> failures{0};
  for (int c = 0; c < kClients + kThreadsOnShared; ++c) {
    threads.emplace_back([&, c] {
      try {
        std::unique_ptr<TcpStore> own;
        if (c < kClients) own = std::make_unique<TcpStore>(client_options(server.port()));
        Store& s = own ? static_cast<Store&>(*own) : shared;
        for (int i = 0; i < kAdds; ++i) s.add("total", 1);
      } catch (const std::exception& e) {
        ADD_FAILURE() << e.what();
        ++failures;
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(failures, 0);
  EXPECT_EQ(shared.add("total", 0), (kClients + kThreadsOnShared) * kAdds);
  EXPECT_EQ(server.stats().auth_failures, 0u);
}

TEST(TcpStore, WrongSecretIsRefusedWithAuthAndGoodClientsKeepWorking) {
  TcpStoreServer server(server_options());
  TcpStore good(client_options(server.port()));
  good.set("k", "v");
  const auto start = SteadyClock::now();
  try {
    TcpStore bad(client_options(server.port(), "not-the-job-secret"));
    FAIL() << "connected with a wrong secret";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kAuth) << e.what();
    EXPECT_NE(std::string(e.what()).find("the job secret does not match"), std::string::npos)
        << e.what();
    EXPECT_NE(std::string(e.what()).find("127.0.0.1:" + std::to_string(server.port())),
              std::string::npos);
  }
  EXPECT_LT(SteadyClock::now() - start, Millis(1000));  // not retried until connect_timeout
  EXPECT_EQ(good.get("k", Millis(1000)), "v");
  expect_serves_good_clients(server.port());
  EXPECT_EQ(server.stats().auth_failures, 1u);
}

TEST(TcpStore, ClientNotHoldingTheSecretCannotPassAsServer) {
  // A listener that answers the hello with its own nonce but a wrong verdict.
  TcpStoreServer real(server_options());
  UniqueFd listener(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::bind(listener.get(), reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
  ASSERT_EQ(::listen(listener.get(), 1), 0);
  socklen_t len = sizeof addr;
  ::getsockname(listener.get(), reinterpret_cast<sockaddr*>(&addr), &len);
  std::thread impostor([&] {
    UniqueFd c(::accept(listener.get(), nullptr, nullptr));
    char hello[40];
    net::read_exact(c.get(), hello, 40, SteadyClock::now() + Millis(2000), -1, "client");
    send_raw(c.get(), std::string(hello, 8) + std::string(32, 'n'));
    char proof[32];
    net::read_exact(c.get(), proof, 32, SteadyClock::now() + Millis(2000), -1, "client");
    send_raw(c.get(),
             std::string(1, '\1') + std::string(32, 'x'));  // "accepted", with a forged proof
    closed_by_server(c.get(), Millis(1000));
  });
  try {
    TcpStore s(client_options(ntohs(addr.sin_port)));
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kAuth);
    EXPECT_NE(std::string(e.what()).find("could not prove"), std::string::npos) << e.what();
  }
  impostor.join();
}

TEST(TcpStore, ReplayedReorderedReflectedOrAlteredFramesAreRefused) {
  TcpStoreServer server(server_options());
  const auto C = net::Direction::kClientToServer;
  {
    RawSession s(server.port());
    const std::string first = net::seal_frame(s.key, C, 0, set_request("replayed", "1"));
    send_raw(s.fd.get(), first);
    // The server answers with its own seq 0, which a fresh channel expects.
    net::FrameChannel reader(s.fd.get(), s.key, C, 1 << 20, -1, "test server");
    const auto reply =
        tcp_wire::decode(reader.recv(SteadyClock::now() + Millis(2000), Millis(2000)), "server");
    EXPECT_EQ(reply.kind, static_cast<std::uint8_t>(tcp_wire::Status::kOk));
    send_raw(s.fd.get(), first);  // the same bytes again
    EXPECT_TRUE(closed_by_server(s.fd.get(), Millis(2000)));
  }
  {
    RawSession s(server.port());  // out of order: seq 1 first
    send_raw(s.fd.get(), net::seal_frame(s.key, C, 1, set_request("reordered", "1")));
    EXPECT_TRUE(closed_by_server(s.fd.get(), Millis(2000)));
  }
  {
    RawSession s(server.port());  // reflected: a server-to-client frame sent to the server
    send_raw(s.fd.get(), net::seal_frame(s.key, net::Direction::kServerToClient, 0,
                                          set_request("reflected", "1")));
    EXPECT_TRUE(closed_by_server(s.fd.get(), Millis(2000)));
  }
  {
    RawSession s(server.port());  // altered payload
    std::string frame = net::seal_frame(s.key, C, 0, set_request("altered", "1"));
    frame[net::kFrameHeaderBytes + 10] ^= 1;
    send_raw(s.fd.get(), frame);
    EXPECT_TRUE(closed_by_server(s.fd.get(), Millis(2000)));
  }
  {
    RawSession a(server.port()), b(server.port());  // a frame from another session
    send_raw(b.fd.get(), net::seal_frame(a.key, C, 0, set_request("cross", "1")));
    EXPECT_TRUE(closed_by_server(b.fd.get(), Millis(2000)));
  }
  expect_serves_good_clients(server.port());
  TcpStore check(client_options(server.port()));
  EXPECT_TRUE(check.check({"replayed"}));
  EXPECT_FALSE(check.check({"reordered"}) || check.check({"reflected"}) ||
               check.check({"altered"}) || check.check({"cross"}));
  EXPECT_EQ(server.stats().bad_macs, 5u);
}

TEST(TcpStore, HugeLengthPrefixIsRefusedBeforeAllocation) {
  TcpStoreServer server(server_options());
  {
    RawSession s(server.port());
    const char prefix[4] = {'\x80', 0, 0, 0};  // 2^31 bytes announced
    send_raw(s.fd.get(), std::string(prefix, 4) + "just a few bytes");
    EXPECT_TRUE(closed_by_server(s.fd.get(), Millis(2000)));
  }
  {
    RawSession s(server.port());
    send_raw(s.fd.get(), std::string(4, '\xff'));  // 4 GiB - 1, and nothing after it
    EXPECT_TRUE(closed_by_server(s.fd.get(), Millis(2000)));
  }
  auto stats = server.stats();
  EXPECT_EQ(stats.oversize_frames, 2u);
  EXPECT_EQ(stats.largest_frame_allocated, 0u);  // not a byte for either frame
  EXPECT_EQ(stats.timed_out, 0u);                // refused on the prefix, not by waiting
  {
    // Before authentication there is no length to lie about: a 2^31 prefix
    // is just a wrong magic.
    UniqueFd fd = raw_connect(server.port());
    send_raw(fd.get(), std::string("\x80\0\0\0", 4) + std::string(36, 'z'));
    EXPECT_TRUE(closed_by_server(fd.get(), Millis(2000)));
  }
  EXPECT_EQ(server.stats().protocol_mismatches, 1u);
  expect_serves_good_clients(server.port());
}

TEST(TcpStore, ConfiguredFrameLimitApplies) {
  auto o = server_options();
  o.max_frame_bytes = 4096;
  TcpStoreServer server(o);
  RawSession s(server.port());
  send_raw(s.fd.get(), net::seal_frame(s.key, net::Direction::kClientToServer, 0,
                                        set_request("k", std::string(8192, 'v'))));
  EXPECT_TRUE(closed_by_server(s.fd.get(), Millis(2000)));
  EXPECT_EQ(server.stats().oversize_frames, 1u);
  EXPECT_LE(server.stats().largest_frame_allocated, 4096u);
  // The client refuses to send what the server would refuse.
  auto co = client_options(server.port());
  co.max_frame_bytes = 4096;
  TcpStore c(co);
  try {
    c.set("k", std::string(8192, 'v'));
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument) << e.what();
  }
  c.set("k", "small");
  EXPECT_EQ(c.get("k", Millis(100)), "small");
}

TEST(TcpStore, SilentAndStalledClientsAreDroppedWhileGoodClientsAreServed) {
  auto o = server_options();
  o.handshake_timeout = Millis(1500);
  o.io_timeout = Millis(1500);
  TcpStoreServer server(o);
  const auto start = SteadyClock::now();
  UniqueFd silent = raw_connect(server.port());
  UniqueFd half_hello = raw_connect(server.port());
  send_raw(half_hello.get(), std::string(net::kMagic, 8) + "0123");  // stops mid-hello
  RawSession stalled(server.port());
  send_raw(stalled.fd.get(), std::string("\0\0\0\x10", 4) + "abc");  // 16 bytes announced, 3 sent
  {
    TcpStore good(client_options(server.port()));
    for (int i = 0; i < 50; ++i) good.add("served", 1);
    EXPECT_EQ(good.add("served", 0), 50);
  }
  // Served while all three still held their connections.
  EXPECT_EQ(server.stats().timed_out, 0u) << "good clients waited on the silent ones";
  EXPECT_GE(server.stats().active_connections, 3u);  // the good one may not be reaped yet
  EXPECT_TRUE(closed_by_server(silent.get(), Millis(4000)));
  EXPECT_TRUE(closed_by_server(half_hello.get(), Millis(4000)));
  EXPECT_TRUE(closed_by_server(stalled.fd.get(), Millis(4000)));
  EXPECT_LT(SteadyClock::now() - start, Millis(4000));
  EXPECT_EQ(server.stats().timed_out, 3u);
  expect_serves_good_clients(server.port());
}

TEST(TcpStore, MalformedRequestIsRefused) {
  TcpStoreServer server(server_options());
  RawSession s(server.port());
  send_raw(s.fd.get(),
           net::seal_frame(s.key, net::Direction::kClientToServer, 0, "\x01\xff\xff\xff\xff"));
  EXPECT_TRUE(closed_by_server(s.fd.get(), Millis(2000)));
  RawSession t(server.port());
  tcp_wire::Message m;
  m.kind = static_cast<std::uint8_t>(tcp_wire::Op::kGet);  // get with two keys
  m.keys = {"a", "b"};
  send_raw(t.fd.get(),
           net::seal_frame(t.key, net::Direction::kClientToServer, 0, tcp_wire::encode(m)));
  EXPECT_TRUE(closed_by_server(t.fd.get(), Millis(2000)));
  EXPECT_EQ(server.stats().malformed_requests, 2u);
  expect_serves_good_clients(server.port());
}

TEST(TcpStore, ConnectionsBeyondTheCapAreClosed) {
  auto o = server_options();
  o.max_connections = 2;
  o.handshake_timeout = Millis(5000);
  TcpStoreServer server(o);
  auto first = std::make_unique<TcpStore>(client_options(server.port()));
  UniqueFd silent = raw_connect(server.port());
  std::this_thread::sleep_for(Millis(50));
  UniqueFd third = raw_connect(server.port());
  EXPECT_TRUE(closed_by_server(third.get(), Millis(2000)));
  EXPECT_GE(server.stats().refused_at_capacity, 1u);
  silent.reset();
  first.reset();
  // Room again once they leave (the client retries meanwhile).
  expect_serves_good_clients(server.port());
}

TEST(TcpStore, ClientRetriesUntilTheServerStarts) {
  int port;
  { port = TcpStoreServer(server_options()).port(); }  // a port that was just free
  std::unique_ptr<TcpStoreServer> server;
  std::thread starter([&] {
    std::this_thread::sleep_for(Millis(200));
    auto o = server_options();
    o.port = port;
    server = std::make_unique<TcpStoreServer>(o);
  });
  TcpStore s(client_options(port));
  starter.join();
  s.set("k", "v");
  EXPECT_EQ(s.get("k", Millis(100)), "v");
}

TEST(TcpStore, ConnectTimeoutNamesHostAndPort) {
  int port;
  { port = TcpStoreServer(server_options()).port(); }
  auto o = client_options(port);
  o.connect_timeout = Millis(300);
  const auto start = SteadyClock::now();
  try {
    TcpStore s(o);
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kTimeout);
    EXPECT_NE(std::string(e.what()).find("127.0.0.1:" + std::to_string(port)), std::string::npos)
        << e.what();
  }
  const auto took = SteadyClock::now() - start;
  EXPECT_GE(took, Millis(300));
  EXPECT_LT(took, Millis(2000));
}

TEST(TcpStore, ServerStopsPromptlyWithBlockedWaiters) {
  auto server = std::make_unique<TcpStoreServer>(server_options());
  TcpStore s(client_options(server->port()));
  std::atomic<bool> raised{false};
  std::thread waiter([&] {
    try {
      s.get("never", Millis(30000));
    } catch (const Error& e) {
      raised = e.code() == ErrorCode::kPeerFailure;
    }
  });
  UniqueFd silent = raw_connect(server->port());
  std::this_thread::sleep_for(Millis(100));
  const auto start = SteadyClock::now();
  server.reset();
  EXPECT_LT(SteadyClock::now() - start, Millis(1000));
  waiter.join();
  EXPECT_TRUE(raised);
  EXPECT_LT(SteadyClock::now() - start, Millis(1500));
}

TEST(TcpStore, ClientGoneDuringWaitFreesItsThread) {
  TcpStoreServer server(server_options());
  {
    RawSession s(server.port());
    tcp_wire::Message m;
    m.kind = static_cast<std::uint8_t>(tcp_wire::Op::kMissing);
    m.keys = {"never"};
    m.number = 60000;
    send_raw(s.fd.get(),
             net::seal_frame(s.key, net::Direction::kClientToServer, 0, tcp_wire::encode(m)));
    std::this_thread::sleep_for(Millis(50));
    EXPECT_EQ(server.stats().active_connections, 1u);
  }
  const auto until = SteadyClock::now() + Millis(2000);
  while (server.stats().active_connections != 0 && SteadyClock::now() < until)
    std::this_thread::sleep_for(Millis(10));
  EXPECT_EQ(server.stats().active_connections, 0u);
}

TEST(TcpStore, BadOptionsAreInvalidArguments) {
  auto o = server_options();
  o.secret.clear();
  EXPECT_THROW(TcpStoreServer{o}, Error);
  EXPECT_THROW(TcpStore(client_options(1234, "")), Error);
  auto bad = server_options();
  bad.bind_address = "not an address";
  EXPECT_THROW(TcpStoreServer{bad}, Error);
}

// A store server whose host was cut off from the network after the client
// connected: it completes the handshake, then reads requests and never
// answers (a link that is down delivers nothing back).
struct CutOffServer {
  CutOffServer() : listener(net::listen_tcp("127.0.0.1", 0, &port, "cut-off store")) {
    thread = std::thread([this] {
      UniqueFd fd(::accept4(listener.get(), nullptr, nullptr, SOCK_CLOEXEC));
      if (!fd.valid()) return;
      net::server_handshake(fd.get(), kSecret, SteadyClock::now() + Millis(2000), -1,
                            "test client");
      char buf[4096];
      while (!stop) {
        pollfd p{fd.get(), POLLIN, 0};
        if (::poll(&p, 1, 20) > 0 && ::recv(fd.get(), buf, sizeof buf, MSG_DONTWAIT) == 0) return;
      }
    });
  }
  ~CutOffServer() {
    stop = true;
    thread.join();
  }
  int port = 0;
  UniqueFd listener;
  std::atomic<bool> stop{false};
  std::thread thread;
};

TEST(TcpStore, CallsWithADeadlineEndByItWhenTheServerNoLongerAnswers) {
  CutOffServer server;
  TcpStore s(client_options(server.port));  // io_timeout 3 s: what the plain calls would wait
  for (int i = 0; i < 2; ++i) {  // the first on the pooled connection, the second on a new one
    const auto start = SteadyClock::now();
    try {
      if (i == 0) s.set_by("hpct/failure/1", "report", Deadline(Millis(300)));
      if (i == 1) s.peek_by("hpct/failure/0", Deadline(Millis(300)));
      ADD_FAILURE() << "a store that never answers answered";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kTimeout) << e.what();
      EXPECT_NE(std::string(e.what()).find("within 300 ms"), std::string::npos) << e.what();
    }
    const auto took = SteadyClock::now() - start;
    EXPECT_GE(took, Millis(250));
    EXPECT_LT(took, Millis(1000)) << "call " << i << " outlived its deadline";
  }
}

TEST(TcpStore, PeekByReturnsTheValueOrNothingAtOnce) {
  TcpStoreServer server(server_options());
  TcpStore s(client_options(server.port()));
  s.set("here", "v");
  const auto start = SteadyClock::now();
  EXPECT_EQ(s.peek_by("here", Deadline(Millis(2000))), std::optional<std::string>("v"));
  EXPECT_EQ(s.peek_by("absent", Deadline(Millis(2000))), std::nullopt);
  EXPECT_LT(SteadyClock::now() - start, Millis(1000)) << "an absent key is not waited for";
  s.set_by("later", "w", Deadline(Millis(2000)));
  EXPECT_EQ(s.get("later", Millis(100)), "w");
}

}  // namespace
}  // namespace hpct::store
