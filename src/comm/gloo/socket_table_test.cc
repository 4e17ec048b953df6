#include "comm/gloo/socket_table.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include "core/fd.h"

namespace hpct::comm {
namespace {

TEST(SocketTable, ParsesAProcNetTcpLine) {
  TcpConnection c;
  unsigned long inode = 0;
  int state = 0;
  ASSERT_TRUE(parse_proc_tcp_line(
      "   3: 0100007F:A1B2 0100007F:1F90 01 00000000:00000000 00:00000000 00000000     0        0 "
      "123456 1 0000000000000000 20 4 30 10 -1",
      &c, &inode, &state));
  EXPECT_EQ(c.local, "[127.0.0.1]:41394");
  EXPECT_EQ(c.remote, "[127.0.0.1]:8080");
  EXPECT_EQ(inode, 123456u);
  EXPECT_EQ(state, 1);
  EXPECT_FALSE(parse_proc_tcp_line(
      "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode",
      &c, &inode, &state));
}

TEST(SocketTable, FindsAConnectionThisProcessOpened) {
  UniqueFd server(::socket(AF_INET, SOCK_STREAM, 0));
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::bind(server.get(), reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  ASSERT_EQ(::listen(server.get(), 1), 0);
  socklen_t len = sizeof a;
  ::getsockname(server.get(), reinterpret_cast<sockaddr*>(&a), &len);
  UniqueFd client(::socket(AF_INET, SOCK_STREAM, 0));
  ASSERT_EQ(::connect(client.get(), reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  sockaddr_in local{};
  len = sizeof local;
  ::getsockname(client.get(), reinterpret_cast<sockaddr*>(&local), &len);
  const std::string want_local = "[127.0.0.1]:" + std::to_string(ntohs(local.sin_port));
  const std::string want_remote = "[127.0.0.1]:" + std::to_string(ntohs(a.sin_port));
  bool found = false;
  for (const auto& c : established_tcp_connections()) {
    if (c.local == want_local && c.remote == want_remote) found = true;
  }
  EXPECT_TRUE(found) << want_local << " -> " << want_remote;
}

}  // namespace
}  // namespace hpct::comm
