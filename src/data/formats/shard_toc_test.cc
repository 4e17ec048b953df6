// The sidecar index against the shards it describes: what the writer puts
// in it must be what a reader finds by walking the shard.
#include "data/formats/shard_toc.h"

#include <gtest/gtest.h>

#include "core/error.h"
#include "data/formats/shard_writer.h"
#include "data/formats/tfrecord.h"
#include "data/test_files.h"

namespace hpct::data {
namespace {

using testing::TempDir;

std::vector<TarMember> walk_tar(const std::string& path) { return testing::read_tar_members(path); }

std::string toc_corrupt_message(const std::string& text) {
  try {
    parse_toc(text, "s3://b/x.tar.idx");
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kDataCorrupt);
    return e.what();
  }
  ADD_FAILURE() << "parsed without error: " << text;
  return "";
}

TEST(ShardToc, WriterSidecarMatchesAWalkOfEachShard) {
  TempDir dir;
  ShardWriterOptions o;
  o.pattern = dir / "t-%03d.tar";
  o.max_count = 3;
  ShardWriter w(o);
  const std::string long_key = "deep/" + std::string(130, 'k');
  for (int i = 0; i < 7; ++i) {
    const std::string key = (i == 4 ? long_key : "s") + std::to_string(i);
    w.write(key, {{"png", std::string(100 + 37 * i, 'p')}, {"cls", std::to_string(i)}});
  }
  w.close();
  ASSERT_EQ(w.shards().size(), 3u);
  for (const auto& shard : w.shards()) {
    const ShardToc toc = parse_toc(testing::slurp(toc_path(shard)), toc_path(shard));
    const std::vector<TarMember> walked = walk_tar(shard);
    EXPECT_FALSE(toc.tfrecord);
    EXPECT_EQ(toc.shard_bytes, testing::slurp(shard).size());
    ASSERT_EQ(toc.members.size(), walked.size()) << shard;
    for (size_t i = 0; i < walked.size(); ++i) {
      EXPECT_EQ(toc.members[i].name, walked[i].name);
      EXPECT_EQ(toc.members[i].index, walked[i].index);
      EXPECT_EQ(toc.members[i].header_offset, walked[i].header_offset);
      EXPECT_EQ(toc.members[i].data_offset, walked[i].data_offset);
      EXPECT_EQ(toc.members[i].size, walked[i].size);
      // The block before the data is the member's own header, and agrees.
      const std::string bytes = testing::slurp(shard);
      EXPECT_TRUE(tar_header_matches(bytes.data() + walked[i].data_offset - kTarBlock, walked[i].name,
                                     walked[i].size))
          << walked[i].name;
      EXPECT_FALSE(tar_header_matches(bytes.data() + walked[i].data_offset - kTarBlock,
                                      walked[i].name, walked[i].size + 1));
      if (walked[i].name.size() <= 100) {
        EXPECT_FALSE(tar_header_matches(bytes.data() + walked[i].data_offset - kTarBlock,
                                        walked[i].name + "x", walked[i].size));
      }
    }
  }
}

TEST(ShardToc, TfRecordSidecarMatchesTheRecordFrames) {
  TempDir dir;
  ShardWriterOptions o;
  o.pattern = dir / "r-%03d.tfrecord";
  o.format = ShardFormat::kTfRecord;
  ShardWriter w(o);
  for (int i = 0; i < 5; ++i) w.write_record(std::string(10 + 100 * i, static_cast<char>('a' + i)));
  w.close();
  const std::string shard = w.shards().at(0);
  const ShardToc toc = parse_toc(testing::slurp(toc_path(shard)), toc_path(shard));
  EXPECT_TRUE(toc.tfrecord);
  PosixFileSystem fs;
  auto f = fs.open_read(shard);
  TfRecordReader reader(*f, OnError::kFail, Logger());
  size_t i = 0;
  while (auto frame = reader.next_frame()) {
    ASSERT_LT(i, toc.members.size());
    EXPECT_EQ(toc.members[i].header_offset, frame->offset);
    EXPECT_EQ(toc.members[i].size, frame->length);
    EXPECT_EQ(read_tfrecord_data(*f, TfRecordFrame{i, toc.members[i].header_offset, toc.members[i].size}),
              std::string(10 + 100 * i, static_cast<char>('a' + i)));
    ++i;
  }
  EXPECT_EQ(i, toc.members.size());
}

TEST(ShardToc, RoundTripsAndRefusesWhatIsNotOne) {
  ShardToc toc;
  toc.shard_bytes = 5120;
  toc.members.push_back({"a b/c.png", 0, 0, 512, 100});
  toc.members.push_back({"a b/c.cls", 1, 1024, 1536, 1});
  const ShardToc back = parse_toc(format_toc(toc), "x.idx");
  ASSERT_EQ(back.members.size(), 2u);
  EXPECT_EQ(back.members[0].name, "a b/c.png");  // a name with a space survives
  EXPECT_EQ(back.members[1].data_offset, 1536u);
  EXPECT_EQ(back.shard_bytes, 5120u);

  EXPECT_NE(toc_corrupt_message("").find("empty"), std::string::npos);
  const std::string e = toc_corrupt_message("PK\x03\x04 something else\n");
  EXPECT_NE(e.find("s3://b/x.tar.idx, line 1"), std::string::npos) << e;
  EXPECT_NE(e.find("hpctrain data index"), std::string::npos) << e;
  EXPECT_NE(toc_corrupt_message("hpctrain-shard-index 1 tar 5120 3\n0 512 100 a.png\n").find("cut short"),
            std::string::npos);
  EXPECT_NE(toc_corrupt_message("hpctrain-shard-index 1 tar 600 1\n0 512 100 a.png\n").find("past the shard"),
            std::string::npos);
  EXPECT_NE(toc_corrupt_message("hpctrain-shard-index 1 tar 5120 1\n0 100 10 a.png\n").find("inside its header"),
            std::string::npos);
  EXPECT_NE(toc_corrupt_message("hpctrain-shard-index 2 tar 5120 0\n").find("version"), std::string::npos);
  EXPECT_TRUE(is_toc_path("s3://b/t-000.tar.idx"));
  EXPECT_FALSE(is_toc_path("s3://b/t-000.tar"));
}

}  // namespace
}  // namespace hpct::data
