// CRC-32C against published check values, and TFRecord damage detection.
#include "data/formats/crc32c.h"

#include <gtest/gtest.h>

#include "core/error.h"
#include "data/test_files.h"
#include "data/formats/tfrecord.h"

namespace hpct::data {
namespace {

TEST(Crc32c, KnownValues) {
  EXPECT_EQ(crc32c("123456789", 9), 0xe3069283u);
  EXPECT_EQ(crc32c("", 0), 0u);
  std::string zeros(32, '\0');
  EXPECT_EQ(crc32c(zeros.data(), zeros.size()), 0x8a9136aau);  // RFC 3720 B.4
  // Continuation equals one pass, at every split point (covers the 8-byte loop and its tail).
  std::string s = "The quick brown fox jumps over the lazy dog, twice over.";
  for (size_t k = 0; k <= s.size(); ++k) {
    EXPECT_EQ(crc32c(s.data() + k, s.size() - k, crc32c(s.data(), k)), crc32c(s.data(), s.size()));
  }
}

TEST(TfRecord, RoundTripsAndNamesFlippedBits) {
  testing::TempDir dir;
  std::string file;
  std::vector<std::string> records = {"", "a", std::string(1000, 'x'), "last record"};
  for (const auto& r : records) file += encode_tfrecord(r);
  testing::write_file(dir / "ok.tfrecord", file);
  PosixFileSystem fs;
  {
    auto f = fs.open_read(dir / "ok.tfrecord");
    TfRecordReader reader(*f);
    for (const auto& r : records) {
      auto got = reader.next();
      ASSERT_TRUE(got);
      EXPECT_EQ(got->data, r);
    }
    EXPECT_FALSE(reader.next());
  }
  // One flipped bit in the data of the third record, then one in a length.
  const size_t third = 12 + 0 + 4 + 12 + 1 + 4;
  for (size_t flip_at : {third + 12 + 500, third + 3}) {
    std::string bad = file;
    bad[flip_at] ^= 0x10;
    testing::write_file(dir / "bad.tfrecord", bad);
    auto f = fs.open_read(dir / "bad.tfrecord");
    TfRecordReader reader(*f);
    ASSERT_TRUE(reader.next());
    ASSERT_TRUE(reader.next());
    try {
      reader.next();
      FAIL() << "flipped bit at " << flip_at << " not detected";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kDataCorrupt);
      std::string m = e.what();
      EXPECT_NE(m.find("bad.tfrecord"), std::string::npos) << m;
      EXPECT_NE(m.find("record 2 at byte offset " + std::to_string(third)), std::string::npos) << m;
      EXPECT_NE(m.find("CRC-32C"), std::string::npos) << m;
    }
  }
  // Cut short in the middle of the last record.
  testing::write_file(dir / "short.tfrecord", file.substr(0, file.size() - 5));
  auto f = fs.open_read(dir / "short.tfrecord");
  TfRecordReader reader(*f);
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(reader.next());
  EXPECT_THROW(reader.next(), Error);
}

}  // namespace
}  // namespace hpct::data
