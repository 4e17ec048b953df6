// Tar reading and writing against GNU tar itself, and real damaged files.
#include "data/formats/tar.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "core/error.h"
#include "data/sample.h"
#include "data/shard_index.h"
#include "data/test_files.h"

namespace hpct::data {
namespace {

using testing::TempDir;

std::string run(const std::string& cmd) {
  std::string out;
  FILE* p = popen((cmd + " 2>&1").c_str(), "r");
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  pclose(p);
  return out;
}

std::vector<TarMember> scan_all(const std::string& path) { return testing::read_tar_members(path); }

void write_tar(const std::string& path, const std::vector<std::pair<std::string, std::string>>& members) {
  PosixFileSystem fs;
  auto f = fs.open_write(path);
  TarWriter w(*f);
  for (const auto& [n, d] : members) w.add(n, d);
  w.finish();
  f->commit();
}

std::string expect_corrupt(const std::string& path) {
  try {
    scan_all(path);
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kDataCorrupt);
    return e.what();
  }
  ADD_FAILURE() << path << " scanned without error";
  return "";
}

TEST(Tar, WriterOutputIsReadByGnuTarAndBack) {
  TempDir dir;
  std::string long_name = "deep/" + std::string(120, 'n') + ".txt";
  std::vector<std::pair<std::string, std::string>> members = {
      {"a/000001.png", std::string(700, 'p')}, {"a/000001.cls", "3"}, {"empty.txt", ""},
      {long_name, "long"}};
  write_tar(dir / "w.tar", members);
  EXPECT_EQ(run("tar -tf " + (dir / "w.tar")),
            "a/000001.png\na/000001.cls\nempty.txt\n" + long_name + "\n");
  EXPECT_EQ(run("tar -xOf " + (dir / "w.tar") + " a/000001.cls"), "3");
  auto got = scan_all(dir / "w.tar");
  ASSERT_EQ(got.size(), members.size());
  PosixFileSystem fs;
  auto f = fs.open_read(dir / "w.tar");
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_EQ(got[i].name, members[i].first);
    EXPECT_EQ(got[i].index, i);
    EXPECT_EQ(read_member(*f, got[i]), members[i].second);
  }
}

TEST(Tar, ReadsGnuAndPaxArchivesMadeByGnuTar) {
  TempDir dir;
  std::string long_dir = dir / ("src/" + std::string(110, 'd'));
  std::filesystem::create_directories(long_dir);
  testing::write_file(long_dir + "/x.0.cls", "7");
  testing::write_file(dir / "src/short.txt", "hello");
  for (std::string fmt : {"gnu", "pax", "ustar"}) {
    if (fmt == "ustar") std::filesystem::remove_all(long_dir);  // ustar cannot hold the long name
    std::string tarf = dir / (fmt + ".tar");
    run("tar --format=" + fmt + " -C " + (dir / "src") + " -cf " + tarf + " .");
    auto got = scan_all(tarf);
    std::map<std::string, std::uint64_t> sizes;
    for (auto& m : got) sizes[m.name] = m.size;
    EXPECT_EQ(sizes["./short.txt"], 5u) << fmt;
    if (fmt != "ustar") {
      EXPECT_EQ(sizes["./" + std::string(110, 'd') + "/x.0.cls"], 1u) << fmt;
    }
  }
}

// A header's checksum as old writers stored it (bytes summed as signed
// chars) is accepted as well as the standard unsigned sum, for a name with
// bytes of 128 and more (where the two differ); any other value is not.
TEST(Tar, ChecksumsOfSignedAndUnsignedBytesAreAcceptedAndOthersAreNot) {
  TempDir dir;
  const std::string name = "caf\xc3\xa9-\xff\x80.cls";
  write_tar(dir / "u.tar", {{name, "7"}, {"next.png", "p"}});
  const std::string good = testing::slurp(dir / "u.tar");
  std::int64_t signed_sum = 8 * ' ';
  for (size_t i = 0; i < 512; ++i) {
    if (i < 148 || i >= 156) signed_sum += static_cast<signed char>(good[i]);
  }
  auto with_sum = [&](std::int64_t sum) {
    std::string t = good;
    char field[8];
    std::snprintf(field, sizeof field, "%06llo", static_cast<unsigned long long>(sum));
    std::memcpy(&t[148], field, 7);  // six digits, NUL, and the space kept at 155
    return t;
  };
  testing::write_file(dir / "s.tar", with_sum(signed_sum));
  auto got = scan_all(dir / "s.tar");
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(got[0].name, name);
  EXPECT_EQ(scan_all(dir / "u.tar").size(), 2u);
  testing::write_file(dir / "x.tar", with_sum(signed_sum + 1));
  EXPECT_NE(expect_corrupt(dir / "x.tar").find("checksum"), std::string::npos);
}

TEST(Tar, DamageIsNamedWithShardMemberAndOffset) {
  TempDir dir;
  write_tar(dir / "good.tar", {{"k1.png", std::string(1000, 'a')}, {"k1.cls", "1"}, {"k2.png", "b"}});
  std::string good = testing::slurp(dir / "good.tar");
  // member 1 (k1.cls) header starts after k1.png's header and 1024 data bytes.
  const size_t second_header = 512 + 1024;

  std::string bad_sum = good;
  bad_sum[second_header + 3] ^= 0x01;  // a byte of the name: checksum no longer matches
  testing::write_file(dir / "badsum.tar", bad_sum);
  std::string m = expect_corrupt(dir / "badsum.tar");
  EXPECT_NE(m.find("badsum.tar"), std::string::npos) << m;
  EXPECT_NE(m.find("member #1"), std::string::npos) << m;
  EXPECT_NE(m.find("byte offset " + std::to_string(second_header)), std::string::npos) << m;
  EXPECT_NE(m.find("checksum"), std::string::npos) << m;

  testing::write_file(dir / "cut.tar", good.substr(0, 512 + 600));  // k1.png's data cut short
  m = expect_corrupt(dir / "cut.tar");
  EXPECT_NE(m.find("member #0 (k1.png), byte offset 0"), std::string::npos) << m;
  EXPECT_NE(m.find("cut short"), std::string::npos) << m;

  testing::write_file(dir / "trunc.tar", good.substr(0, second_header + 512 + 512));  // no end marker
  m = expect_corrupt(dir / "trunc.tar");
  EXPECT_NE(m.find("truncated tar"), std::string::npos) << m;

  testing::write_file(dir / "half.tar", good.substr(0, second_header + 100));  // inside a header
  m = expect_corrupt(dir / "half.tar");
  EXPECT_NE(m.find("byte offset " + std::to_string(second_header)), std::string::npos) << m;
}

TEST(Tar, IndexGroupsMembersIntoSamplesAndSkipsDamage) {
  TempDir dir;
  write_tar(dir / "a.tar", {{"x/000.png", "p0"}, {"x/000.cls", "0"}, {"x/001.png", "p1"},
                            {"x/001.cls", "1"}, {"x/002.seg.png", "s2"}});
  std::string good = testing::slurp(dir / "a.tar");
  testing::write_file(dir / "b.tar", good.substr(0, 512 * 5 + 100));  // ends after x/001.png, no end marker
  auto fs = std::make_shared<PosixFileSystem>();
  auto idx = ShardIndex::build({dir / "a.tar"}, fs, OnError::kFail);
  ASSERT_EQ(idx->size(), 3u);
  EXPECT_EQ(idx->sample(0).key, "x/000");
  EXPECT_EQ(idx->sample(2).fields[0].ext, "seg.png");
  RawSample s = idx->read(1);
  ASSERT_EQ(s.fields.size(), 2u);
  EXPECT_EQ(s.fields[0].second, "p1");
  EXPECT_EQ(s.fields[1].first, "cls");
  EXPECT_THROW(ShardIndex::build({dir / "a.tar", dir / "b.tar"}, fs, OnError::kFail), Error);
  auto skipped = ShardIndex::build({dir / "a.tar", dir / "b.tar", dir / "missing.tar"}, fs,
                                   OnError::kSkip);
  // b.tar: x/000 is whole; x/001 was being read when the damage hit.
  EXPECT_EQ(skipped->shard_samples(), (std::vector<std::uint64_t>{3, 1, 0}));
  EXPECT_EQ(skipped->stats().skipped_samples, 1u);
  EXPECT_EQ(skipped->stats().damaged_shards, 2u);
  ASSERT_EQ(skipped->stats().errors.size(), 2u);
  EXPECT_NE(skipped->stats().errors[0].find("b.tar, member #3, byte offset 3072: archive ends"),
            std::string::npos)
      << skipped->stats().errors[0];
}

}  // namespace
}  // namespace hpct::data
