// Sharded checkpoints: saved by 3 ranks, loaded bit-exact by 2 and 4 with
// even and uneven partitions, reading only the files that hold the ranges;
// a writer killed mid-write or a failing disk leaves the previous
// checkpoint the newest usable one; a torn, bit-flipped or missing shard is
// named and every rank falls back together.
#include "train/sharded_checkpoint.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <condition_variable>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <random>
#include <thread>

#include "core/error.h"

namespace hpct::train {
namespace {

namespace fs = std::filesystem;

// The state of a small model with Adam: raw bytes per tensor.
struct Tensor {
  std::vector<std::int64_t> shape;
  std::string dtype;
  std::string bytes;
  std::int64_t numel() const {
    std::int64_t n = 1;
    for (auto d : shape) n *= d;
    return n;
  }
};

std::map<std::string, Tensor> make_state(std::uint32_t seed) {
  std::mt19937 rng(seed);
  std::map<std::string, Tensor> s;
  auto fill = [&](const std::string& name, std::vector<std::int64_t> shape,
                  const std::string& dtype) {
    Tensor t{shape, dtype, ""};
    t.bytes.resize(static_cast<std::size_t>(t.numel()) * sharded_dtype_size(dtype));
    for (auto& c : t.bytes) c = static_cast<char>(rng());
    s[name] = t;
  };
  for (const char* p : {"fc1.weight", "fc2.weight"}) {
    fill(std::string("param/") + p, {37, 11}, "float32");
    fill(std::string("optim/") + p + "/exp_avg", {37, 11}, "float32");
    fill(std::string("optim/") + p + "/exp_avg_sq", {37, 11}, "float32");
  }
  fill("param/fc1.bias", {37}, "float32");
  fill("param/tiny", {2}, "bfloat16");  // fewer elements than ranks
  fill("state/step", {}, "int64");      // a scalar: one element
  return s;
}

// Element ranges [cuts[r], cuts[r+1]) of a tensor for each rank.
using Partition = std::function<std::vector<std::int64_t>(std::int64_t numel, int world)>;

std::vector<std::int64_t> contiguous(std::int64_t numel, int world) {
  std::vector<std::int64_t> cuts{0};
  for (int r = 0; r < world; ++r)
    cuts.push_back(cuts.back() + numel / world + (r < numel % world ? 1 : 0));
  return cuts;
}

// Uneven: rank 0 takes a sliver, the last rank most, one rank may get none.
std::vector<std::int64_t> uneven(std::int64_t numel, int world) {
  std::vector<std::int64_t> cuts{0};
  for (int r = 1; r < world; ++r)
    cuts.push_back(std::min(numel, cuts.back() + (r == 1 ? 1 : numel / (2 * world))));
  cuts.push_back(numel);
  return cuts;
}

std::vector<CheckpointPiece> pieces_for(const std::map<std::string, Tensor>& s, int rank, int world,
                                        const Partition& part) {
  std::vector<CheckpointPiece> out;
  for (const auto& [name, t] : s) {
    auto cuts = part(t.numel(), world);
    const std::int64_t n = cuts[rank + 1] - cuts[rank];
    if (n == 0) continue;
    const std::size_t es = sharded_dtype_size(t.dtype);
    out.push_back({name, t.shape, t.dtype, cuts[rank], n, t.bytes.data() + cuts[rank] * es});
  }
  return out;
}

// Every rank writes its shard (as 3 writers in turn), then rank 0 the index.
std::string save(CheckpointFiles& files, const std::string& dir, std::int64_t step,
                 const std::map<std::string, Tensor>& s, int world, const Partition& part) {
  std::vector<ShardFile> shards;
  for (int r = 0; r < world; ++r) {
    // Through JSON, as the ShardFile travels to rank 0.
    shards.push_back(shard_file_from_json(shard_file_to_json(
        write_shard(files, dir, step, r, world, pieces_for(s, r, world, part)))));
  }
  return write_index(files, dir, step, world, shards, {{"model", "test"}});
}

// One loading rank's buffers: its range of every tensor.
struct RankBuffers {
  std::map<std::string, std::string> bytes;
  std::map<std::string, std::int64_t> offset;
  std::vector<RangeRequest> requests(const ShardedIndex& idx, int rank, int world,
                                     const Partition& part) {
    std::vector<RangeRequest> wants;
    for (const auto& [name, t] : idx.tensors) {
      auto cuts = part(t.numel, world);
      const std::int64_t n = cuts[rank + 1] - cuts[rank];
      bytes[name].assign(static_cast<std::size_t>(n) * sharded_dtype_size(t.dtype), '\0');
      offset[name] = cuts[rank];
      wants.push_back({name, cuts[rank], n, t.dtype, bytes[name].data()});
    }
    return wants;
  }
};

// Counts what is read, to show a rank reads only what it needs.
class CountingFiles final : public CheckpointFiles {
 public:
  explicit CountingFiles(std::shared_ptr<CheckpointFiles> real) : real_(std::move(real)) {}
  std::unique_ptr<Writer> create(const std::string& d, const std::string& n) override {
    return real_->create(d, n);
  }
  std::string read_range(const std::string& path, std::uint64_t offset, std::uint64_t n) override {
    std::lock_guard<std::mutex> lock(mu);
    read_bytes[fs::path(path).filename().string()] += n;
    return real_->read_range(path, offset, n);
  }
  std::uint64_t size(const std::string& path) override { return real_->size(path); }
  std::mutex mu;
  std::map<std::string, std::uint64_t> read_bytes;

 private:
  std::shared_ptr<CheckpointFiles> real_;
};

// Ranks as threads: agree() returns true when every rank said ok.
class Agreement {
 public:
  explicit Agreement(int world) : world_(world) {}
  bool operator()(bool ok) {
    std::unique_lock<std::mutex> lock(mu_);
    const std::uint64_t round = round_;
    all_ok_ &= ok;
    if (++arrived_ == world_) {
      result_ = all_ok_;
      all_ok_ = true;
      arrived_ = 0;
      ++round_;
      cv_.notify_all();
    } else {
      EXPECT_TRUE(cv_.wait_for(lock, std::chrono::seconds(30), [&] { return round_ != round; }))
          << "a rank did not reach the agreement";
    }
    return result_;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  int world_;
  int arrived_ = 0;
  bool all_ok_ = true;
  bool result_ = false;
  std::uint64_t round_ = 0;
};

class ShardedCheckpointTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = (fs::temp_directory_path() / "hpct-sharded-test-XXXXXX").string();
    ASSERT_NE(::mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
    log_ = Logger(LogLevel::kDebug, "all", 0, [this](const std::string& line) {
      std::lock_guard<std::mutex> lock(mu_);
      warnings_ += line + "\n";
    });
  }
  void TearDown() override { fs::remove_all(dir_); }

  // Loads at `world` ranks (threads); checks every rank's bytes against
  // `want` bit for bit; returns the step loaded (-1: none).
  std::int64_t load_and_check(CheckpointFiles& files, int world, const Partition& part,
                              const std::map<std::string, Tensor>& want) {
    Agreement agree(world);
    std::vector<std::int64_t> steps(world, -2);
    std::vector<RankBuffers> bufs(world);
    std::vector<std::thread> ranks;
    auto candidates = list_sharded_indexes(dir_);
    for (int r = 0; r < world; ++r) {
      ranks.emplace_back([&, r] {
        auto idx = load_newest(
            files, candidates, log_,
            [&](const ShardedIndex& i) { return bufs[r].requests(i, r, world, part); },
            [&](std::int64_t, bool ok) { return agree(ok); });
        steps[r] = idx ? idx->step : -1;
      });
    }
    for (auto& t : ranks) t.join();
    for (int r = 1; r < world; ++r)
      EXPECT_EQ(steps[r], steps[0]) << "ranks loaded different checkpoints";
    if (steps[0] < 0) return steps[0];
    for (int r = 0; r < world; ++r) {
      for (const auto& [name, t] : want) {
        const std::size_t es = sharded_dtype_size(t.dtype);
        const auto& got = bufs[r].bytes.at(name);
        EXPECT_EQ(got, t.bytes.substr(bufs[r].offset.at(name) * es, got.size()))
            << name << " differs on rank " << r << " of " << world;
      }
    }
    return steps[0];
  }

  std::string dir_;
  std::mutex mu_;
  std::string warnings_;
  Logger log_;
  std::shared_ptr<CheckpointFiles> files_ = posix_checkpoint_files();
};

TEST_F(ShardedCheckpointTest, SavedAtThreeLoadsBitExactAtTwoAndFour) {
  auto state = make_state(1);
  save(*files_, dir_, 10, state, 3, contiguous);
  for (int world : {2, 4, 3, 1}) {
    EXPECT_EQ(load_and_check(*files_, world, contiguous, state), 10)
        << world << " ranks, contiguous";
    EXPECT_EQ(load_and_check(*files_, world, uneven, state), 10) << world << " ranks, uneven";
  }
  EXPECT_EQ(warnings_, "");
  // Saved unevenly too: the index does not care how the ranks split.
  auto later = make_state(2);
  save(*files_, dir_, 20, later, 3, uneven);
  EXPECT_EQ(load_and_check(*files_, 4, contiguous, later), 20);
  EXPECT_EQ(load_and_check(*files_, 2, uneven, later), 20);
  auto idx = read_index(*files_, list_sharded_indexes(dir_).front());
  EXPECT_EQ(idx.world_size, 3);
  EXPECT_EQ(idx.meta["model"], "test");
  EXPECT_EQ(idx.tensors.at("param/fc1.weight").shape, (std::vector<std::int64_t>{37, 11}));
  EXPECT_NO_THROW(verify_shards(*files_, idx));
  // No temporary files are left behind.
  for (const auto& e : fs::recursive_directory_iterator(dir_))
    EXPECT_NE(e.path().filename().string()[0], '.');
}

TEST_F(ShardedCheckpointTest, ARankReadsOnlyTheFilesAndPiecesItNeeds) {
  auto state = make_state(3);
  save(*files_, dir_, 10, state, 3, contiguous);
  CountingFiles counting(files_);
  auto idx = read_index(counting, list_sharded_indexes(dir_).front());
  counting.read_bytes.clear();
  // Rank 0 of 4 needs the first quarter: all of it lies in rank 0's third.
  RankBuffers buf;
  read_ranges(counting, idx, buf.requests(idx, 0, 4, contiguous));
  EXPECT_EQ(counting.read_bytes.size(), 1u);
  std::uint64_t third = 0;
  for (const auto& p : idx.tensors)
    third += p.second.pieces[0].numel * sharded_dtype_size(p.second.dtype);
  EXPECT_EQ(counting.read_bytes[shard_file_name(0, 3)], third);
  for (const auto& [name, t] : state) {
    EXPECT_EQ(buf.bytes[name], t.bytes.substr(0, buf.bytes[name].size())) << name;
  }
}

TEST_F(ShardedCheckpointTest, KilledWriterLeavesThePreviousCheckpointUsable) {
  auto good = make_state(4);
  save(*files_, dir_, 10, good, 3, contiguous);
  // A writer that stops half-way through rank 1's shard and says so.
  int pipefd[2];
  ASSERT_EQ(::pipe(pipefd), 0);
  pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    ::close(pipefd[0]);
    struct StallingFiles final : CheckpointFiles {
      std::shared_ptr<CheckpointFiles> real = posix_checkpoint_files();
      int fd = -1;
      struct W final : Writer {
        std::unique_ptr<Writer> real;
        int fd;
        std::uint64_t n = 0;
        void append(const void* d, std::size_t k) override {
          real->append(d, k);
          if ((n += k) > 1000 && fd >= 0) {
            (void)!::write(fd, "x", 1);
            ::pause();  // until SIGKILL
          }
        }
        void commit() override { real->commit(); }
      };
      std::unique_ptr<Writer> create(const std::string& d, const std::string& name) override {
        auto w = std::make_unique<W>();
        w->real = real->create(d, name);
        w->fd = name == shard_file_name(1, 3) ? fd : -1;
        return w;
      }
      std::string read_range(const std::string& p, std::uint64_t o, std::uint64_t n) override {
        return real->read_range(p, o, n);
      }
      std::uint64_t size(const std::string& p) override { return real->size(p); }
    } stalling;
    stalling.fd = pipefd[1];
    save(stalling, dir_, 20, make_state(5), 3, contiguous);
    ::_exit(0);  // not reached
  }
  ::close(pipefd[1]);
  char c = 0;
  ASSERT_EQ(::read(pipefd[0], &c, 1), 1) << "the writer ended before stalling";
  ::kill(child, SIGKILL);
  int status = 0;
  ::waitpid(child, &status, 0);
  ::close(pipefd[0]);
  ASSERT_TRUE(WIFSIGNALED(status));
  // Rank 0's shard is complete, rank 1's a temporary file, no index.
  const std::string folder = sharded_folder(dir_, 20);
  EXPECT_TRUE(fs::exists(folder + "/" + shard_file_name(0, 3)));
  EXPECT_TRUE(fs::exists(folder + "/." + shard_file_name(1, 3) + ".tmp"));
  EXPECT_FALSE(fs::exists(folder + "/index.json"));
  EXPECT_EQ(load_and_check(*files_, 2, contiguous, good), 10);
  // The next save at that step completes and wins.
  auto redo = make_state(6);
  save(*files_, dir_, 20, redo, 3, contiguous);
  EXPECT_EQ(load_and_check(*files_, 4, uneven, redo), 20);
}

TEST_F(ShardedCheckpointTest, FailingDiskLeavesNoIndexAndNoTemporaryFile) {
  auto good = make_state(7);
  save(*files_, dir_, 10, good, 3, contiguous);
  struct FullDisk final : CheckpointFiles {
    std::shared_ptr<CheckpointFiles> real = posix_checkpoint_files();
    struct W final : Writer {
      std::unique_ptr<Writer> real;
      std::uint64_t n = 0;
      void append(const void* d, std::size_t k) override {
        if ((n += k) > 500) throw_io("write shard (injected)", ENOSPC);
        real->append(d, k);
      }
      void commit() override { real->commit(); }
    };
    std::unique_ptr<Writer> create(const std::string& d, const std::string& name) override {
      if (name != shard_file_name(2, 3)) return real->create(d, name);
      auto w = std::make_unique<W>();
      w->real = real->create(d, name);
      return w;
    }
    std::string read_range(const std::string& p, std::uint64_t o, std::uint64_t n) override {
      return real->read_range(p, o, n);
    }
    std::uint64_t size(const std::string& p) override { return real->size(p); }
  } full;
  try {
    save(full, dir_, 20, make_state(8), 3, contiguous);
    FAIL() << "the failing write was not reported";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kIo);
  }
  for (const auto& e : fs::recursive_directory_iterator(dir_))
    EXPECT_NE(e.path().filename().string()[0], '.');
  EXPECT_EQ(list_sharded_indexes(dir_).size(), 1u);
  EXPECT_EQ(load_and_check(*files_, 3, uneven, good), 10);
}

TEST_F(ShardedCheckpointTest, BitFlippedShardIsNamedAndEveryRankFallsBack) {
  auto good = make_state(9);
  save(*files_, dir_, 10, good, 3, contiguous);
  save(*files_, dir_, 20, make_state(10), 3, contiguous);
  const std::string bad = sharded_folder(dir_, 20) + "/" + shard_file_name(2, 3);
  {
    std::fstream f(bad, std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(200);
    char ch = 0;
    f.read(&ch, 1);
    ch ^= 0x04;
    f.seekp(200);
    f.write(&ch, 1);
  }
  auto idx = read_index(*files_, list_sharded_indexes(dir_).front());
  try {
    verify_shards(*files_, idx);
    FAIL() << "bit flip not detected";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kDataCorrupt);
    EXPECT_NE(std::string(e.what()).find(bad), std::string::npos) << e.what();
  }
  // At 4 ranks only the last one reads rank 2's file; all fall back.
  EXPECT_EQ(load_and_check(*files_, 4, contiguous, good), 10);
  EXPECT_NE(warnings_.find(bad + " (rank 2 of 3): CRC-32C"), std::string::npos) << warnings_;
  EXPECT_NE(warnings_.find("another rank could not read its part"), std::string::npos) << warnings_;
}

TEST_F(ShardedCheckpointTest, TornOrMissingShardIsNamedWithTheRanksNeeded) {
  auto good = make_state(11);
  save(*files_, dir_, 10, good, 3, contiguous);
  save(*files_, dir_, 20, make_state(12), 3, contiguous);
  const std::string folder = sharded_folder(dir_, 20);
  fs::resize_file(folder + "/" + shard_file_name(1, 3), 300);
  EXPECT_EQ(load_and_check(*files_, 2, contiguous, good), 10);
  EXPECT_NE(warnings_.find(shard_file_name(1, 3) + " (rank 1 of 3): 300 bytes, index says"),
            std::string::npos)
      << warnings_;
  fs::remove(folder + "/" + shard_file_name(1, 3));
  auto idx = read_index(*files_, folder + "/index.json");
  RankBuffers buf;
  try {
    read_ranges(*files_, idx,
                buf.requests(idx, 0, 2, contiguous));  // the first half: ranks 0 and 1
    FAIL() << "missing shard not reported";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kIo);
    EXPECT_NE(std::string(e.what()).find("needs the files of ranks 0, 1 of the 3-rank checkpoint"),
              std::string::npos)
        << e.what();
  }
}

TEST_F(ShardedCheckpointTest, GapsOverlapsAndBadIndexesAreRefused) {
  auto state = make_state(13);
  std::vector<ShardFile> shards;
  for (int r = 0; r < 2; ++r) {
    auto ps = pieces_for(state, r, 2, contiguous);
    if (r == 1) {
      // Rank 1 starts one element late: a gap after rank 0's part.
      for (auto& p : ps) {
        p.data = static_cast<const char*>(p.data) + sharded_dtype_size(p.dtype);
        p.offset += 1;
        p.numel -= 1;
      }
    }
    shards.push_back(write_shard(*files_, dir_, 30, r, 2, ps));
  }
  try {
    write_index(*files_, dir_, 30, 2, shards, {});
    FAIL() << "gap not reported";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("no piece holds elements"), std::string::npos) << e.what();
  }
  EXPECT_THROW(write_index(*files_, dir_, 30, 3, shards, {}), Error);  // rank 2 missing
  fs::create_directories(sharded_folder(dir_, 40));
  { std::ofstream(sharded_folder(dir_, 40) + "/index.json") << "{\"step\": 4"; }
  save(*files_, dir_, 10, state, 3, contiguous);
  EXPECT_EQ(load_and_check(*files_, 2, contiguous, state), 10);
  EXPECT_NE(warnings_.find("sharded-0000000040/index.json: not a sharded checkpoint index"),
            std::string::npos)
      << warnings_;
}

TEST_F(ShardedCheckpointTest, OldCheckpointsArePrunedIndexFirst) {
  auto state = make_state(14);
  fs::create_directories(sharded_folder(dir_, 5));  // a write that crashed before its index
  for (int s = 1; s <= 5; ++s) save(*files_, dir_, s * 10, state, 3, contiguous);
  auto all = list_sharded_indexes(dir_);
  ASSERT_EQ(all.size(), 3u);
  EXPECT_NE(all[0].find("sharded-0000000050"), std::string::npos);
  EXPECT_NE(all[2].find("sharded-0000000030"), std::string::npos);
  EXPECT_FALSE(fs::exists(sharded_folder(dir_, 20)));
  EXPECT_FALSE(fs::exists(sharded_folder(dir_, 5)));
}

}  // namespace
}  // namespace hpct::train
