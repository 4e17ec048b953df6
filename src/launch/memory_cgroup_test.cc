#include "launch/memory_cgroup.h"

#include <gtest/gtest.h>

#include "core/error.h"
#include "launch/rank_protocol.h"

namespace hpct::launch {
namespace {

TEST(MemoryCgroup, SizesParseAndBadOnesNameTheOption) {
  EXPECT_EQ(parse_memory_per_rank("2G"), 2ull << 30);
  EXPECT_EQ(parse_memory_per_rank("1500M"), 1500ull << 20);
  EXPECT_EQ(parse_memory_per_rank("1.5GiB"), 3ull << 29);
  EXPECT_EQ(parse_memory_per_rank("2147483648"), 2ull << 30);
  for (const char* bad : {"", "lots", "2X", "-1G", "4K"}) {
    try {
      parse_memory_per_rank(bad);
      ADD_FAILURE() << "accepted '" << bad << "'";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
      EXPECT_NE(std::string(e.what()).find("--memory-per-rank"), std::string::npos) << e.what();
    }
  }
  EXPECT_EQ(describe_limit(3ull << 29), "1610612736 bytes (1.50 GiB)");
}

TEST(MemoryCgroup, FindsTheMemoryHierarchyInMountinfo) {
  // A hybrid host: v1 controllers beside an empty cgroup2 (this VM's layout).
  const std::string hybrid =
      "30 25 0:26 / /sys/fs/cgroup ro,nosuid shared:9 - tmpfs tmpfs ro,mode=755\n"
      "31 30 0:27 / /sys/fs/cgroup/unified rw,relatime shared:10 - cgroup2 cgroup2 rw\n"
      "33 30 0:29 / /sys/fs/cgroup/cpu,cpuacct rw,relatime shared:12 - cgroup cgroup rw,cpu,cpuacct\n"
      "36 30 0:32 / /sys/fs/cgroup/memory rw,relatime shared:15 - cgroup cgroup rw,memory\n";
  MemoryHierarchy h = parse_mountinfo(hybrid);
  EXPECT_EQ(h.version, 1);
  EXPECT_EQ(h.mount_point, "/sys/fs/cgroup/memory");
  EXPECT_EQ(h.mount_root, "/");
  const std::string v2 = "29 23 0:26 / /sys/fs/cgroup rw,nosuid,nodev,noexec,relatime shared:4 - cgroup2 cgroup2 rw\n";
  h = parse_mountinfo(v2);
  EXPECT_EQ(h.version, 2);
  EXPECT_EQ(h.mount_point, "/sys/fs/cgroup");
  EXPECT_EQ(parse_mountinfo("22 1 8:1 / / rw - ext4 /dev/sda1 rw\n").version, 0);
}

TEST(MemoryCgroup, APathInProcCgroupMapsToItsDirectory) {
  const std::string proc = "9:name=systemd:/\n4:memory:/process_api/abc\n1:cpu,cpuacct:/x\n0::/user.slice/s\n";
  EXPECT_EQ(parse_proc_cgroup(proc, 1), "/process_api/abc");
  EXPECT_EQ(parse_proc_cgroup(proc, 2), "/user.slice/s");
  EXPECT_EQ(parse_proc_cgroup("0::/\n", 1), "");
  MemoryHierarchy h{1, "/sys/fs/cgroup/memory", "/"};
  EXPECT_EQ(cgroup_directory(h, "/process_api/abc"), "/sys/fs/cgroup/memory/process_api/abc");
  EXPECT_EQ(cgroup_directory(h, "/"), "/sys/fs/cgroup/memory");
  // A bind mount of a sub-tree (a container's view) shows only what is under it.
  MemoryHierarchy sub{2, "/sys/fs/cgroup", "/docker/c1"};
  EXPECT_EQ(cgroup_directory(sub, "/docker/c1/a"), "/sys/fs/cgroup/a");
  EXPECT_EQ(cgroup_directory(sub, "/docker/c1"), "/sys/fs/cgroup");
  EXPECT_EQ(cgroup_directory(sub, "/other"), "");
}

TEST(MemoryCgroup, CountersAndLimitsParse) {
  EXPECT_EQ(keyed_value("oom_kill_disable 0\nunder_oom 0\noom_kill 3\n", "oom_kill"), 3u);
  EXPECT_EQ(keyed_value("low 0\nhigh 0\nmax 12\noom 2\noom_kill 1\noom_group_kill 0\n", "oom_kill"), 1u);
  EXPECT_FALSE(keyed_value("oom 2\n", "oom_kill"));
  EXPECT_EQ(parse_limit("max\n"), 0u);
  EXPECT_EQ(parse_limit("9223372036854771712\n"), 0u);
  EXPECT_EQ(parse_limit("2147483648\n"), 2147483648u);
}

TEST(MemoryCgroup, AnOomEndTravelsInTheExitRecordAndNamesLimitAndFix) {
  RankEnd e;
  e.signal = 9;
  e.oom = true;
  e.oom_limit = 2ull << 30;
  e.oom_limit_from_launch = true;
  e.oom_cgroup = "/sys/fs/cgroup/memory/hpctrain-launch-1-2/rank-0";
  const RankEnd back = parse_rank_end(encode_rank_end(e));
  EXPECT_TRUE(back.oom);
  EXPECT_EQ(back.signal, 9);
  EXPECT_EQ(back.launcher_exit_code(), 137);
  EXPECT_EQ(back.oom_limit, 2ull << 30);
  EXPECT_EQ(back.oom_cgroup, e.oom_cgroup);
  const std::string d = back.describe();
  for (const char* part : {"killed by the kernel's out-of-memory killer", "2147483648 bytes (2.00 GiB)",
                           "rank-0", "--shard 3 (docs/sharding.md)", "fewer ranks per host",
                           "a larger --memory-per-rank"}) {
    EXPECT_NE(d.find(part), std::string::npos) << part << " not in: " << d;
  }
  EXPECT_EQ(d.find('\n'), std::string::npos);
  // A limit set outside hpctrain, and none at all.
  e.oom_limit_from_launch = false;
  EXPECT_NE(parse_rank_end(encode_rank_end(e)).describe().find("outside hpctrain"), std::string::npos);
  e.oom_limit = 0;
  EXPECT_NE(parse_rank_end(encode_rank_end(e)).describe().find("the host ran out of memory"), std::string::npos);
  // A plain SIGKILL stays one.
  EXPECT_FALSE(parse_rank_end("signal 9").oom);
}

}  // namespace
}  // namespace hpct::launch
