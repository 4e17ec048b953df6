// The network layer's promises, on real loopback sockets: a bounded read
// names what it waited for, an oversize frame is refused before anything is
// allocated, a stranger is refused within the handshake's bound, a tampered
// frame fails its MAC, and the accept loop counts and caps connections.
#include <gtest/gtest.h>
#include <fcntl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <optional>
#include <thread>

#include "core/error.h"
#include "net/auth.h"
#include "net/connection_server.h"
#include "net/frame.h"
#include "net/socket.h"

namespace hpct::net {
namespace {

Logger quiet() {
  return Logger(LogLevel::kError, "all", -1, [](const std::string&) {});
}

// A connected pair of non-blocking stream sockets.
struct Pair {
  Pair() {
    int fds[2];
    EXPECT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, fds), 0);
    a.reset(fds[0]);
    b.reset(fds[1]);
  }
  UniqueFd a, b;
};

SteadyClock::time_point in(Millis ms) { return SteadyClock::now() + ms; }

template <typename F>
Error expect_error(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e;
  }
  ADD_FAILURE() << "no error raised";
  return Error(ErrorCode::kIo, "none");
}

// Both ends of a handshake, each with its own secret; returns the client's
// error code (or none) and the two session keys.
struct Handshake {
  Mac client_key{}, server_key{};
  std::optional<ErrorCode> client_error, server_error;
  Millis server_took{0};
};

Handshake run_handshake(const std::string& client_secret, const std::string& server_secret,
                        Millis bound) {
  Pair p;
  Handshake h;
  std::thread server([&] {
    const auto start = SteadyClock::now();
    try {
      h.server_key = server_handshake(p.b.get(), server_secret, in(bound), -1, "test client");
    } catch (const Error& e) {
      h.server_error = e.code();
    }
    h.server_took = std::chrono::duration_cast<Millis>(SteadyClock::now() - start);
  });
  try {
    h.client_key = client_handshake(p.a.get(), client_secret, in(bound), "test server");
  } catch (const Error& e) {
    h.client_error = e.code();
  }
  server.join();
  return h;
}

TEST(NetSocket, BoundedReadTimesOutNamingWhatItWaitedFor) {
  Pair p;
  char buf[8];
  const auto start = SteadyClock::now();
  Error e = expect_error(
      [&] { read_exact(p.a.get(), buf, sizeof buf, in(Millis(200)), -1, "the quiet peer"); });
  const auto took = SteadyClock::now() - start;
  EXPECT_EQ(e.code(), ErrorCode::kTimeout);
  EXPECT_NE(std::string(e.what()).find("timed out reading from the quiet peer"),
            std::string::npos)
      << e.what();
  EXPECT_GE(took, Millis(190));
  EXPECT_LT(took, Millis(2000));
}

TEST(NetSocket, WriteAllWritesEverythingOrNamesThePeerThatLeft) {
  Pair p;
  const std::string big(1 << 20, 'x');  // more than a socket buffer: needs the reader
  std::string got(big.size(), '\0');
  std::thread reader(
      [&] { read_exact(p.b.get(), got.data(), got.size(), in(Millis(5000)), -1, "writer"); });
  write_all(p.a.get(), big.data(), big.size(), in(Millis(5000)), -1, "reader");
  reader.join();
  EXPECT_EQ(got, big);
  p.b.reset();
  Error e = expect_error([&] { write_all(p.a.get(), "abc", 3, in(Millis(1000)), -1, "reader"); });
  EXPECT_EQ(e.code(), ErrorCode::kPeerFailure);
  EXPECT_NE(std::string(e.what()).find("reader closed the connection"), std::string::npos);
}

TEST(NetSocket, WriteAllWritesToAPipe) {
  int fds[2];
  ASSERT_EQ(::pipe2(fds, O_CLOEXEC), 0);
  UniqueFd r(fds[0]), w(fds[1]);
  write_all(w.get(), "hello", 5, in(Millis(1000)), -1, "a pipe");
  char buf[5];
  ASSERT_EQ(::read(r.get(), buf, 5), 5);
  EXPECT_EQ(std::string(buf, 5), "hello");
}

TEST(NetAuth, MatchingSecretsAgreeOnASessionKey) {
  Handshake h = run_handshake("job secret", "job secret", Millis(3000));
  EXPECT_FALSE(h.client_error);
  EXPECT_FALSE(h.server_error);
  EXPECT_TRUE(macs_equal(h.client_key, h.server_key));
}

TEST(NetAuth, StrangerWithTheWrongSecretIsRefusedWithinTheBound) {
  Handshake h = run_handshake("a guess", "job secret", Millis(2000));
  EXPECT_EQ(h.client_error, ErrorCode::kAuth);
  EXPECT_EQ(h.server_error, ErrorCode::kAuth);
  EXPECT_LT(h.server_took, Millis(2000));  // refused on its proof, not by waiting
}

TEST(NetAuth, SilentStrangerIsRefusedWhenTheBoundRunsOut) {
  Pair p;  // connects and says nothing
  const auto start = SteadyClock::now();
  Error e = expect_error(
      [&] { server_handshake(p.b.get(), "job secret", in(Millis(300)), -1, "silent client"); });
  EXPECT_EQ(e.code(), ErrorCode::kTimeout);
  EXPECT_NE(std::string(e.what()).find("silent client"), std::string::npos);
  EXPECT_LT(SteadyClock::now() - start, Millis(2000));
}

TEST(NetAuth, StrangerSpeakingAnotherProtocolIsAMismatch) {
  Pair p;
  write_all(p.a.get(), std::string(40, 'G').data(), 40, in(Millis(1000)), -1, "server");
  Error e = expect_error(
      [&] { server_handshake(p.b.get(), "job secret", in(Millis(1000)), -1, "odd client"); });
  EXPECT_EQ(e.code(), ErrorCode::kMismatch);
}

// A sealed channel pair over a socketpair, keys from a real handshake.
struct Channels {
  Channels() {
    std::thread t([&] { skey = server_handshake(p.b.get(), "s", in(Millis(3000)), -1, "c"); });
    ckey = client_handshake(p.a.get(), "s", in(Millis(3000)), "s");
    t.join();
  }
  Pair p;
  Mac ckey{}, skey{};
};

TEST(NetFrame, FramesRoundTripInOrder) {
  Channels c;
  FrameChannel client(c.p.a.get(), c.ckey, Direction::kClientToServer, 1 << 20, -1, "server");
  FrameChannel server(c.p.b.get(), c.skey, Direction::kServerToClient, 1 << 20, -1, "client");
  client.send("one", in(Millis(1000)));
  client.send(std::string(100000, 'z'), in(Millis(1000)));
  client.send("", in(Millis(1000)));
  EXPECT_EQ(server.recv(in(Millis(1000)), Millis(1000)), "one");
  EXPECT_EQ(server.recv(in(Millis(1000)), Millis(1000)), std::string(100000, 'z'));
  EXPECT_EQ(server.recv(in(Millis(1000)), Millis(1000)), "");
  server.send("reply", in(Millis(1000)));
  EXPECT_EQ(client.recv(in(Millis(1000)), Millis(1000)), "reply");
}

TEST(NetFrame, FrameOverTheLimitIsRefusedBeforeAllocation) {
  Channels c;
  FrameChannel server(c.p.b.get(), c.skey, Direction::kServerToClient, 4096, -1, "client");
  // Only the length arrives: refused on it, without waiting for the rest.
  const char length[4] = {'\x40', 0, 0, 0};  // 1 GiB announced
  write_all(c.p.a.get(), length, 4, in(Millis(1000)), -1, "server");
  const auto start = SteadyClock::now();
  Error e = expect_error([&] { server.recv(in(Millis(1000)), Millis(1000)); });
  EXPECT_EQ(e.code(), ErrorCode::kDataCorrupt);
  EXPECT_NE(std::string(e.what()).find("the limit is 4096"), std::string::npos) << e.what();
  EXPECT_LT(SteadyClock::now() - start, Millis(900));
  EXPECT_EQ(server.largest_allocation(), 0u);
  // The sender refuses too, naming the setting.
  FrameChannel client(c.p.a.get(), c.ckey, Direction::kClientToServer, 4096, -1, "server");
  Error s = expect_error([&] { client.send(std::string(4097, 'x'), in(Millis(1000))); });
  EXPECT_EQ(s.code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(std::string(s.what()).find("HPCT_MAX_FRAME_BYTES"), std::string::npos);
}

TEST(NetFrame, TamperedReplayedOrReflectedFrameFailsItsMac) {
  const auto C = Direction::kClientToServer;
  auto refused = [](const std::string& bytes, const Channels& c) {
    write_all(c.p.a.get(), bytes.data(), bytes.size(), in(Millis(1000)), -1, "server");
    FrameChannel server(c.p.b.get(), c.skey, Direction::kServerToClient, 1 << 20, -1, "client");
    return expect_error([&] { server.recv(in(Millis(1000)), Millis(1000)); }).code();
  };
  {
    Channels c;
    std::string frame = seal_frame(c.ckey, C, 0, "set x = 1");
    frame[kFrameHeaderBytes + 8] ^= 1;  // "1" becomes "0"
    EXPECT_EQ(refused(frame, c), ErrorCode::kAuth);
  }
  {
    Channels c;
    std::string frame = seal_frame(c.ckey, C, 0, "set x = 1");
    frame[20] ^= 1;  // a header field the payload does not carry
    EXPECT_EQ(refused(frame, c), ErrorCode::kAuth);
  }
  {
    Channels c;  // seq 1 where 0 is due: a replay or a reordering
    EXPECT_EQ(refused(seal_frame(c.ckey, C, 1, "set x = 1"), c), ErrorCode::kAuth);
  }
  {
    Channels c;  // the server's own direction sent back to it
    EXPECT_EQ(refused(seal_frame(c.ckey, Direction::kServerToClient, 0, "x"), c),
              ErrorCode::kAuth);
  }
  {
    Channels c;  // an untampered frame passes
    FrameChannel server(c.p.b.get(), c.skey, Direction::kServerToClient, 1 << 20, -1, "client");
    const std::string frame = seal_frame(c.ckey, C, 0, "set x = 1");
    write_all(c.p.a.get(), frame.data(), frame.size(), in(Millis(1000)), -1, "server");
    EXPECT_EQ(server.recv(in(Millis(1000)), Millis(1000)), "set x = 1");
  }
}

TEST(NetFrame, LinkLandsPayloadsWhereTheOwnerSays) {
  Pair p;
  Mac key{};
  Link out(p.a.get(), "receiver", key, /*mac_frames=*/false, Direction::kClientToServer, 1 << 20);
  Link in_link(p.b.get(), "sender", key, false, Direction::kServerToClient, 1 << 20);
  const std::vector<float> values = {1.5f, 2.5f, -3.0f};
  FrameHeader h;
  h.kind = 3;
  h.piece = 7;
  h.step = 42;
  h.bytes = values.size() * sizeof(float);
  send_frame(out, h, values.data(), in(Millis(1000)));
  std::vector<float> landed(3);
  FrameHeader seen;
  bool done = false;
  for (int i = 0; i < 100 && !done; ++i) {
    in_link.pump_recv([&](const FrameHeader&) { return Landing{landed.data()}; },
                      [&](const FrameHeader& g, const char*) {
                        seen = g;
                        done = true;
                        return false;
                      });
    if (!done) wait_readable(p.b.get(), in(Millis(1000)), -1, "sender");
  }
  ASSERT_TRUE(done);
  EXPECT_EQ(landed, values);
  EXPECT_EQ(seen.kind, 3);
  EXPECT_EQ(seen.piece, 7u);
  EXPECT_EQ(seen.step, 42u);
  EXPECT_EQ(in_link.largest_allocation(), 0u);  // nothing buffered: it landed in place
}

TEST(NetConnectionServer, ServesCountsAndCapsConnections) {
  ConnectionServerOptions o;
  o.who = "test server";
  o.peer_kind = "test client";
  o.max_connections = 1;
  o.logger = quiet();
  std::atomic<int> served{0};
  ConnectionServer server(o, [&](UniqueFd fd, const std::string& peer, int wake_fd) {
    EXPECT_NE(peer.find("test client 127.0.0.1:"), std::string::npos);
    ++served;
    char b;
    try {
      read_exact(fd.get(), &b, 1, kNoDeadline, wake_fd, peer);  // held until stop()
    } catch (const Woken&) {
    }
  });
  ASSERT_GT(server.port(), 0);
  UniqueFd first = connect_tcp("127.0.0.1", server.port(), in(Millis(2000)), "server");
  for (int i = 0; i < 200 && server.counts().active_connections < 1; ++i) {
    std::this_thread::sleep_for(Millis(10));
  }
  UniqueFd second = connect_tcp("127.0.0.1", server.port(), in(Millis(2000)), "server");
  for (int i = 0; i < 200 && server.counts().refused_at_capacity < 1; ++i) {
    std::this_thread::sleep_for(Millis(10));
  }
  const ConnectionCounts c = server.counts();
  EXPECT_EQ(c.accepted, 1u);
  EXPECT_EQ(c.refused_at_capacity, 1u);
  EXPECT_EQ(c.active_connections, 1u);
  const auto start = SteadyClock::now();
  server.stop();  // wakes the held connection
  EXPECT_LT(SteadyClock::now() - start, Millis(3000));
  EXPECT_EQ(served.load(), 1);
  EXPECT_EQ(server.counts().active_connections, 0u);
}

}  // namespace
}  // namespace hpct::net
