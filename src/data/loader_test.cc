// The Loader on real Fashion-MNIST shards: ranks as threads partition an
// epoch, orders are deterministic, batches hold the original pixels, damaged
// input is named or counted, a saved position resumes exactly, and what a
// remote file system is told to fetch is what the rank reads.
#include "data/loader.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <dirent.h>
#include <sched.h>

#include <chrono>
#include <cstdlib>
#include <map>
#include <mutex>
#include <set>
#include <thread>

#include "core/error.h"
#include "data/formats/tar.h"
#include "data/test_files.h"

namespace hpct::data {
namespace {

using testing::TempDir;

struct Shards {
  TempDir dir;
  std::vector<std::string> paths;
  testing::SmallMnist mnist;
};

// 250 samples in shards of 40 (the last one short).
const Shards& shards() {
  static Shards* s = [] {
    auto* s = new Shards;
    s->paths = testing::write_mnist_shards(s->dir.path(), 250, 40);
    s->mnist = testing::load_mnist(250);
    return s;
  }();
  return *s;
}

LoaderOptions options(int rank, int size) {
  LoaderOptions o;
  o.shards = {shards().dir / "shard-{0000..0006}.tar"};
  o.rank = rank;
  o.size = size;
  o.seed = 11;
  o.batch_size = 16;
  o.shuffle_buffer = 64;
  o.shuffle_initial = 16;
  o.threads = 2;
  o.prefetch = 3;
  o.timeout = Millis(30000);
  return o;
}

std::vector<std::string> read_epoch(Loader& l, std::vector<Batch>* batches = nullptr) {
  std::vector<std::string> keys;
  Batch b;
  while (l.next(&b)) {
    keys.insert(keys.end(), b.keys.begin(), b.keys.end());
    if (batches) batches->push_back(b);
  }
  return keys;
}

TEST(Loader, RanksPartitionAnEpochAndOrdersAreDeterministic) {
  ASSERT_EQ(shards().paths.size(), 7u);
  for (int size : {2, 3, 4}) {
    std::vector<std::vector<std::string>> got(size);
    std::vector<std::int64_t> nbatches(size);
    std::vector<std::thread> ranks;
    for (int r = 0; r < size; ++r) {
      ranks.emplace_back([&, r] {
        Loader l(options(r, size));
        l.start_epoch(2);
        nbatches[r] = l.batches_per_epoch();
        got[r] = read_epoch(l);
      });
    }
    for (auto& t : ranks) t.join();
    std::map<std::string, int> count;
    for (int r = 0; r < size; ++r) {
      EXPECT_EQ(nbatches[r], nbatches[0]) << "every rank gets as many batches";
      EXPECT_EQ(got[r].size(), got[0].size());
      for (auto& k : got[r]) ++count[k];
    }
    EXPECT_EQ(count.size(), 250u) << "size " << size << ": the union is the dataset";
    // Padding (drop_last off) repeats ceil(250/size)*size - 250 samples.
    const int per_rank = (250 + size - 1) / size;
    int repeats = 0;
    for (auto& [k, n] : count) repeats += n - 1;
    EXPECT_EQ(repeats, per_rank * size - 250) << "size " << size;
  }
  Loader a(options(1, 2)), b(options(1, 2));
  auto e0 = read_epoch(a), e0_again = read_epoch(b);
  EXPECT_EQ(e0, e0_again) << "same seed, same order";
  a.start_epoch(1);
  EXPECT_NE(read_epoch(a), e0) << "another epoch, another order";
  auto o = options(1, 2);
  o.seed = 12;
  Loader c(o);
  EXPECT_NE(read_epoch(c), e0) << "another seed, another order";
}

TEST(Loader, BatchesHoldTheOriginalPixelsAndLabels) {
  auto o = options(0, 1);
  o.drop_last = true;
  Loader l(o);
  EXPECT_EQ(l.batches_per_epoch(), 250 / 16);
  std::vector<Batch> batches;
  auto keys = read_epoch(l, &batches);
  EXPECT_EQ(keys.size(), 250u / 16 * 16);
  for (const auto& b : batches) {
    ASSERT_EQ(b.images.sizes(), (std::vector<std::int64_t>{16, 1, 28, 28}));
    ASSERT_EQ(b.images.scalar_type(), at::kByte);
    for (size_t i = 0; i < b.keys.size(); ++i) {
      const int id = std::stoi(b.keys[i]);
      EXPECT_EQ(b.labels[i].item<std::int64_t>(), shards().mnist.labels[id]);
      const auto* px = b.images[i].data_ptr<std::uint8_t>();
      ASSERT_TRUE(std::equal(px, px + 784, shards().mnist.images[id].pixels.begin())) << b.keys[i];
    }
  }
  // Normalized float with augmentation: shape and range.
  o.normalize = true;
  o.mean = {0.2860f};
  o.std = {0.3530f};
  o.augment.crop_height = 24;
  o.augment.crop_width = 24;
  o.augment.crop_padding = 2;
  o.augment.hflip = true;
  Loader f(o);
  Batch b;
  ASSERT_TRUE(f.next(&b));
  EXPECT_EQ(b.images.sizes(), (std::vector<std::int64_t>{16, 1, 24, 24}));
  EXPECT_EQ(b.images.scalar_type(), at::kFloat);
  EXPECT_NEAR(b.images.min().item<float>(), -0.2860f / 0.3530f, 1e-5);
}

TEST(Loader, ResumedRunSeesTheSameRest) {
  auto o = options(1, 3);
  o.augment.crop_height = 26;
  o.augment.crop_width = 26;
  o.augment.hflip = true;
  o.normalize = true;
  Loader full(o);
  full.start_epoch(4);
  std::vector<Batch> all;
  read_epoch(full, &all);
  ASSERT_GT(all.size(), 3u);
  for (int k : {0, 2, static_cast<int>(all.size())}) {
    Loader first(o);
    first.start_epoch(4);
    Batch b;
    for (int i = 0; i < k; ++i) ASSERT_TRUE(first.next(&b));
    std::string state = first.save_state();
    Loader resumed(o);  // a fresh loader, as after a restart
    resumed.restore_state(state);
    std::vector<Batch> rest;
    read_epoch(resumed, &rest);
    ASSERT_EQ(rest.size(), all.size() - k);
    for (size_t i = 0; i < rest.size(); ++i) {
      EXPECT_EQ(rest[i].keys, all[k + i].keys);
      EXPECT_EQ(rest[i].index, all[k + i].index);
      EXPECT_TRUE(at::equal(rest[i].images, all[k + i].images)) << "batch " << k + i;
      EXPECT_TRUE(at::equal(rest[i].labels, all[k + i].labels));
    }
  }
  auto other = o;
  other.seed = 99;
  Loader wrong(other);
  try {
    wrong.restore_state(full.save_state());
    FAIL() << "a state of another seed was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kMismatch);
    EXPECT_NE(std::string(e.what()).find("seed"), std::string::npos);
  }
  EXPECT_THROW(wrong.restore_state("junk"), Error);
}

// One damaged shard among good ones: fail names it, skip counts it.
struct Damage {
  std::string name;
  std::string expect;  // in the fail message
  std::uint64_t skipped;  // samples lost with skip (index + decode)
};

void damage_check(const Damage& d, const std::string& shard_path) {
  SCOPED_TRACE(d.name);
  auto o = options(0, 1);
  o.shards = {shards().paths[0], shard_path};
  o.timeout = Millis(20000);
  try {
    Loader l(o);
    read_epoch(l);
    ADD_FAILURE() << "damage not detected";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kDataCorrupt) << e.what();
    std::string m = e.what();
    EXPECT_NE(m.find(shard_path), std::string::npos) << m;
    EXPECT_NE(m.find("member #"), std::string::npos) << m;
    EXPECT_NE(m.find("byte offset"), std::string::npos) << m;
    EXPECT_NE(m.find(d.expect), std::string::npos) << m;
  }
  o.on_error = OnError::kSkip;
  Loader l(o);
  auto keys = read_epoch(l);
  LoaderStats s = l.stats();
  EXPECT_EQ(s.skipped + s.index_skipped, d.skipped);
  EXPECT_EQ(keys.size() + s.skipped, l.samples_per_epoch());
}

TEST(Loader, DamagedInputIsNamedWithFailAndCountedWithSkip) {
  TempDir dir;
  const std::string good = testing::slurp(shards().paths[1]);  // 40 samples, png + cls each
  // Member layout: each png member is 512 + 512k bytes; read them from the tar.
  PosixFileSystem fs;
  auto f = fs.open_read(shards().paths[1]);
  TarScanner scan(*f);
  std::vector<TarMember> m;
  while (auto x = scan.next()) m.push_back(*x);
  ASSERT_EQ(m.size(), 80u);

  std::string truncated = good.substr(0, m[20].header_offset + 100);  // inside member 20's header
  testing::write_file(dir / "truncated.tar", truncated);
  damage_check({"truncated tar", "truncated tar", 1}, dir / "truncated.tar");

  std::string badsum = good;
  badsum[m[30].header_offset + 10] ^= 0x20;  // header 30 (sample 15's png)
  testing::write_file(dir / "badsum.tar", badsum);
  damage_check({"bad checksum", "checksum", 1}, dir / "badsum.tar");

  // Member 41's data runs past the end of the file.
  testing::write_file(dir / "cut.tar", good.substr(0, m[41].data_offset + m[41].size - 1));
  damage_check({"member cut short", "cut short", 1}, dir / "cut.tar");

  // Sample without its label: rewrite the shard, dropping one .cls.
  {
    auto w = fs.open_write(dir / "nolabel.tar");
    TarWriter tw(*w);
    for (size_t i = 0; i < m.size(); ++i) {
      if (i == 7) continue;  // sample 3's .cls
      tw.add(m[i].name, read_member(*f, m[i]));
    }
    tw.finish();
    w->commit();
  }
  damage_check({"missing label", "no label field", 1}, dir / "nolabel.tar");

  // An image that does not decode (the PNG's IDAT scrambled), another that is not an image.
  {
    auto w = fs.open_write(dir / "badimage.tar");
    TarWriter tw(*w);
    for (size_t i = 0; i < m.size(); ++i) {
      std::string data = read_member(*f, m[i]);
      if (i == 10) data = data.substr(0, data.size() / 2);
      if (i == 12) data = "not an image at all";
      tw.add(m[i].name, data);
    }
    tw.finish();
    w->commit();
  }
  damage_check({"image does not decode", "does not decode", 2}, dir / "badimage.tar");
}


// Threads of this process under SCHED_IDLE, from /proc/self/task.
int idle_threads() {
  int n = 0;
  DIR* d = ::opendir("/proc/self/task");
  if (d == nullptr) return -1;
  while (dirent* e = ::readdir(d)) {
    if (e->d_name[0] == '.') continue;
    if (::sched_getscheduler(static_cast<pid_t>(std::atoi(e->d_name))) == SCHED_IDLE) ++n;
  }
  ::closedir(d);
  return n;
}

TEST(Loader, DecodeThreadsRunAtIdlePriorityUnlessTurnedOff) {
  for (bool idle : {true, false}) {
    auto o = options(0, 1);
    o.threads = 2;
    o.idle_priority = idle;
    Loader l(o);
    Batch b;
    ASSERT_TRUE(l.next(&b));
    // Each decode thread sets its policy when it first runs; on a loaded
    // machine one may not have run yet when the first batch arrives.
    const int want = idle ? 2 : 0;
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (idle_threads() != want && std::chrono::steady_clock::now() < until) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    EXPECT_EQ(idle_threads(), want) << "idle_priority " << idle;
    EXPECT_EQ(::sched_getscheduler(0), SCHED_OTHER) << "the caller's thread must keep its policy";
    read_epoch(l);
  }
}


// Local files that log the byte ranges read of each (once `recording`),
// and the latest will_read hint: what a remote file system would be told.
struct ReadLog {
  std::mutex mu;
  bool recording = false;
  std::map<std::string, std::pair<std::uint64_t, std::uint64_t>> read;  // lowest offset, highest end
  std::vector<std::string> hint_paths;
  std::vector<ReadRange> hint_ranges;
};

class LoggedFile final : public RandomAccessFile {
 public:
  LoggedFile(std::unique_ptr<RandomAccessFile> f, std::string path, ReadLog* log)
      : f_(std::move(f)), path_(std::move(path)), log_(log) {}
  size_t read_at(std::uint64_t offset, char* buf, size_t n) const override {
    const size_t k = f_->read_at(offset, buf, n);
    std::lock_guard<std::mutex> lock(log_->mu);
    if (log_->recording && k > 0) {
      auto [it, fresh] = log_->read.try_emplace(path_, offset, offset + k);
      it->second.first = std::min(it->second.first, offset);
      it->second.second = std::max(it->second.second, offset + k);
    }
    return k;
  }
  std::uint64_t size() const override { return f_->size(); }
  const std::string& name() const override { return f_->name(); }

 private:
  std::unique_ptr<RandomAccessFile> f_;
  std::string path_;
  ReadLog* log_;
};

class LoggingFileSystem final : public FileSystem {
 public:
  std::unique_ptr<RandomAccessFile> open_read(const std::string& path) override {
    return std::make_unique<LoggedFile>(PosixFileSystem().open_read(path), path, &log);
  }
  std::unique_ptr<WritableFile> open_write(const std::string& path) override {
    return PosixFileSystem().open_write(path);
  }
  void will_read(const std::vector<std::string>& paths, const std::vector<ReadRange>& ranges) override {
    std::lock_guard<std::mutex> lock(log.mu);
    if (!log.recording) return;
    log.hint_paths = paths;
    log.hint_ranges = ranges;
  }
  ReadLog log;
};

// What a remote file system is told before an epoch: the shards this rank
// reads, and of each the bytes it reads (a member's header before its first
// sample, a TFRecord frame's CRC after its last), not the whole shard.
TEST(Loader, PrefetchAnnouncesTheShardsItReadsWithTheBytesItReads) {
  for (int rank : {0, 1}) {
    auto fs = std::make_shared<LoggingFileSystem>();
    auto o = options(rank, 2);
    o.fs = fs;
    Loader l(o);  // the index reads every shard whole: not logged
    l.start_epoch(1);
    fs->log.recording = true;
    l.prefetch();
    read_epoch(l);
    std::lock_guard<std::mutex> lock(fs->log.mu);
    ASSERT_EQ(fs->log.hint_paths.size(), fs->log.hint_ranges.size());
    std::set<std::string> hinted(fs->log.hint_paths.begin(), fs->log.hint_paths.end());
    std::set<std::string> read;
    for (const auto& [path, range] : fs->log.read) read.insert(path);
    EXPECT_EQ(hinted, read) << "rank " << rank;
    EXPECT_LT(read.size(), shards().paths.size()) << "rank " << rank << " of 2 read every shard";
    for (size_t i = 0; i < fs->log.hint_paths.size(); ++i) {
      const auto& path = fs->log.hint_paths[i];
      const ReadRange& r = fs->log.hint_ranges[i];
      const auto& [lowest, highest] = fs->log.read[path];
      EXPECT_LE(r.first, lowest) << path;
      EXPECT_LE(lowest - r.first, 1024u) << path << ": more than a member's headers before the first read";
      EXPECT_GE(r.end, highest) << path;
      EXPECT_LE(r.end - highest, 4u) << path;
    }
  }
}

// The model's probe: the sample next() gives first, decoded the same, and
// the epoch is still whole after it.
TEST(Loader, PeekGivesTheSampleNextGivesWithoutTakingIt) {
  Loader a(options(1, 2)), b(options(1, 2));
  a.start_epoch(3);
  b.start_epoch(3);
  Batch p;
  ASSERT_TRUE(a.peek(&p));
  ASSERT_EQ(p.keys.size(), 1u);
  std::vector<Batch> batches;
  const auto keys = read_epoch(a, &batches);
  EXPECT_EQ(keys, read_epoch(b));
  ASSERT_FALSE(keys.empty());
  EXPECT_EQ(p.keys[0], keys[0]);
  EXPECT_TRUE(at::equal(p.images[0], batches[0].images[0]));
  EXPECT_EQ(p.labels[0].item<std::int64_t>(), batches[0].labels[0].item<std::int64_t>());
  Batch after;
  EXPECT_FALSE(a.peek(&after)) << "the epoch is over: nothing is next";
}

TEST(Loader, JobConfigReachesTheLoaderOptions) {
  Config c;
  c.data_prefetch = 7;
  c.data_shuffle_buffer = 50;
  c.data_on_error = "skip";
  c.data_reconnects = 3;
  c.data_idle_priority = false;
  LoaderOptions o;
  o.threads = 3;
  apply_config(c, &o);
  EXPECT_EQ(o.prefetch, 7);
  EXPECT_EQ(o.shuffle_buffer, 50u);
  EXPECT_LE(o.shuffle_initial, 50u);
  EXPECT_EQ(o.on_error, OnError::kSkip);
  EXPECT_EQ(o.max_reconnects, 3);
  EXPECT_FALSE(o.idle_priority);
  EXPECT_EQ(o.threads, 3) << "the thread count is the caller's";
  c.data_prefetch = 0;
  EXPECT_THROW(apply_config(c, &o), Error);
  c.data_prefetch = 2;
  c.data_on_error = "ignore";
  EXPECT_THROW(apply_config(c, &o), Error);
}

}  // namespace
}  // namespace hpct::data
