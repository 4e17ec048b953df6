#include "launch/hostfile.h"

#include <gtest/gtest.h>

#include "core/error.h"

namespace hpct::launch {
namespace {

TEST(Hostfile, OpenMpiAndHorovodFormsCommentsAndBlankLines) {
  auto hosts = parse_hostfile_text(
      "# cluster\n\nnode1 slots=4\nnode2:2   # two GPUs\n  node3\nnode4 slots=2 max_slots=8\n", "hosts.txt");
  ASSERT_EQ(hosts.size(), 4u);
  EXPECT_EQ(hosts[0].name, "node1");
  EXPECT_EQ(hosts[0].slots, 4);
  EXPECT_EQ(hosts[0].origin, "hosts.txt:3");
  EXPECT_EQ(hosts[1].name, "node2");
  EXPECT_EQ(hosts[1].slots, 2);
  EXPECT_EQ(hosts[2].slots, 1);
  EXPECT_EQ(hosts[3].slots, 2);
}

TEST(Hostfile, RepeatedHostAddsSlots) {
  auto hosts = parse_hostfile_text("a:2\nb\na slots=3\n", "h");
  ASSERT_EQ(hosts.size(), 2u);
  EXPECT_EQ(hosts[0].slots, 5);
}

TEST(Hostfile, ErrorsNameFileAndLine) {
  auto expect_error = [](const std::string& text, const std::string& want) {
    try {
      parse_hostfile_text(text, "hosts.txt");
      FAIL() << "no error for " << text;
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
      EXPECT_NE(std::string(e.what()).find(want), std::string::npos) << e.what();
    }
  };
  expect_error("a\nb slots=x\n", "hosts.txt:2");
  expect_error("a:0\n", "hosts.txt:1");
  expect_error("a cpus=3\n", "hosts.txt:1: unexpected 'cpus=3'");
  expect_error("a:2 slots=2\n", "slots given twice");
  expect_error("bad/host\n", "not a host name");
  expect_error("# nothing\n\n", "lists no host");
  EXPECT_THROW(parse_hostfile("/nonexistent/hosts"), Error);
}

TEST(Hostfile, HostList) {
  auto hosts = parse_host_list("h1:2,h2:2,h3");
  ASSERT_EQ(hosts.size(), 3u);
  EXPECT_EQ(hosts[2].slots, 1);
  EXPECT_EQ(hosts[0].origin, "-H h1:2");
  EXPECT_THROW(parse_host_list("h1,,h2"), Error);
  EXPECT_THROW(parse_host_list("h1:two"), Error);
}

TEST(Hostfile, LocalHosts) {
  LocalIdentity self;
  self.names = {"vm.example", "vm"};
  self.addresses = {"127.0.0.1", "10.1.2.3"};
  EXPECT_TRUE(is_local_host("localhost", self));
  EXPECT_TRUE(is_local_host("127.0.0.1", self));
  EXPECT_TRUE(is_local_host("vm", self));
  EXPECT_TRUE(is_local_host("10.1.2.3", self));
  EXPECT_FALSE(is_local_host("10.1.2.4", self));
  EXPECT_FALSE(is_local_host("no-such-host.invalid", self));
  EXPECT_TRUE(is_local_host("localhost", LocalIdentity::current()));
  EXPECT_EQ(interface_address("lo"), "127.0.0.1");
  EXPECT_THROW(interface_address("nosuchif0"), Error);
}

}  // namespace
}  // namespace hpct::launch
