// Checkpoint files: atomic pairs, newest-first resume, damaged payloads
// (truncated, bit-flipped, manifest garbled) skipped for the previous one.
#include "train/checkpoint.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "core/error.h"

namespace hpct::train {
namespace {

namespace fs = std::filesystem;

class CheckpointTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = (fs::temp_directory_path() / "hpct-ckpt-test-XXXXXX").string();
    ASSERT_NE(::mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
    log_ = Logger(LogLevel::kDebug, "all", 0, [this](const std::string& line) { warnings_ += line + "\n"; });
  }
  void TearDown() override { fs::remove_all(dir_); }

  static std::string payload(int step) { return std::string(1000 + step, static_cast<char>('a' + step)); }

  std::string dir_;
  std::string warnings_;
  Logger log_;
};

TEST_F(CheckpointTest, NewestWholeOneWinsAndOldOnesArePruned) {
  for (int s = 1; s <= 5; ++s) write_checkpoint(dir_, s * 10, s, payload(s), 3);
  auto all = list_checkpoints(dir_);
  ASSERT_EQ(all.size(), 3u);
  EXPECT_EQ(all[0].step, 50);
  EXPECT_EQ(all[2].step, 30);
  std::string bytes;
  auto latest = find_latest(dir_, log_, &bytes);
  ASSERT_TRUE(latest);
  EXPECT_EQ(latest->step, 50);
  EXPECT_EQ(latest->epoch, 5);
  EXPECT_EQ(bytes, payload(5));
  EXPECT_EQ(warnings_, "");
  // No temporary files are left behind.
  for (const auto& e : fs::directory_iterator(dir_)) EXPECT_NE(e.path().filename().string()[0], '.');
}

TEST_F(CheckpointTest, TruncatedPayloadFallsBackToThePreviousOne) {
  write_checkpoint(dir_, 10, 0, payload(1));
  auto newest = write_checkpoint(dir_, 20, 0, payload(2));
  fs::resize_file(newest.payload_path, 500);
  EXPECT_THROW(read_checkpoint(newest), Error);
  std::string bytes;
  auto latest = find_latest(dir_, log_, &bytes);
  ASSERT_TRUE(latest);
  EXPECT_EQ(latest->step, 10);
  EXPECT_EQ(bytes, payload(1));
  EXPECT_NE(warnings_.find("ckpt-0000000020.pt: 500 bytes, manifest says 1002"), std::string::npos)
      << warnings_;
}

TEST_F(CheckpointTest, BitFlipFallsBackToThePreviousOne) {
  write_checkpoint(dir_, 10, 0, payload(1));
  auto newest = write_checkpoint(dir_, 20, 0, payload(2));
  {
    std::fstream f(newest.payload_path, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(777);
    char c = static_cast<char>('b' ^ 0x10);
    f.write(&c, 1);
  }
  try {
    read_checkpoint(newest);
    FAIL() << "bit flip not detected";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kDataCorrupt);
    EXPECT_NE(std::string(e.what()).find("CRC-32C"), std::string::npos) << e.what();
  }
  auto latest = find_latest(dir_, log_, nullptr);
  ASSERT_TRUE(latest);
  EXPECT_EQ(latest->step, 10);
  EXPECT_NE(warnings_.find("skipping damaged checkpoint"), std::string::npos) << warnings_;
}

TEST_F(CheckpointTest, GarbledManifestAndMissingPayloadAreSkipped) {
  write_checkpoint(dir_, 10, 0, payload(1));
  auto mid = write_checkpoint(dir_, 20, 0, payload(2));
  auto newest = write_checkpoint(dir_, 30, 0, payload(3));
  { std::ofstream(newest.manifest_path, std::ios::trunc) << "{\"step\": 3"; }
  fs::remove(mid.payload_path);
  auto latest = find_latest(dir_, log_, nullptr);
  ASSERT_TRUE(latest);
  EXPECT_EQ(latest->step, 10);
  EXPECT_NE(warnings_.find("ckpt-0000000030.json: not a checkpoint manifest"), std::string::npos)
      << warnings_;
}

TEST_F(CheckpointTest, EmptyOrMissingDirectoryHasNone) {
  EXPECT_FALSE(find_latest(dir_, log_, nullptr));
  EXPECT_FALSE(find_latest(dir_ + "/absent", log_, nullptr));
}

}  // namespace
}  // namespace hpct::train
