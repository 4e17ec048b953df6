// ShardFileSystem's spools against a real HTTP server (Python's http.server,
// started on loopback by the test): bytes read back exactly, spools in
// memory kept within their bound by dropping read shards no reader holds,
// a shard with no room in memory spooled to a file instead, a second
// download started only when a reader needs it, and hints: a range fetched
// alone, a later hint replacing an earlier one.
#include "data/source/remote_fs.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <random>
#include <thread>

#include "core/env.h"
#include "data/source/short_slice.h"
#include "data/source/spool.h"

namespace hpct::data {
namespace {

namespace fs = std::filesystem;

int free_port() {
  int s = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t n = sizeof a;
  if (::bind(s, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 ||
      ::getsockname(s, reinterpret_cast<sockaddr*>(&a), &n) != 0) {
    ::close(s);
    return -1;
  }
  ::close(s);
  return ntohs(a.sin_port);
}

bool listening(int port) {
  int s = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<std::uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  const bool ok = ::connect(s, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
  ::close(s);
  return ok;
}

// python3 -m http.server serving `dir` on loopback; killed by its PID.
class HttpServer {
 public:
  explicit HttpServer(const std::string& dir) {
    port_ = free_port();
    pid_ = ::fork();
    if (pid_ == 0) {
      const int null = ::open("/dev/null", O_WRONLY);  // its request log
      ::dup2(null, 1);
      ::dup2(null, 2);
      const std::string port = std::to_string(port_);
      ::execlp("python3", "python3", "-m", "http.server", "--bind", "127.0.0.1", "--directory",
               dir.c_str(), port.c_str(), static_cast<char*>(nullptr));
      ::_exit(127);
    }
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(15);
    while (!listening(port_) && std::chrono::steady_clock::now() < deadline)
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  ~HttpServer() {
    if (pid_ > 0) {
      ::kill(pid_, SIGTERM);
      ::waitpid(pid_, nullptr, 0);
    }
  }
  bool up() const { return port_ > 0 && listening(port_); }
  std::string base() const { return "http://127.0.0.1:" + std::to_string(port_); }

 private:
  int port_ = -1;
  pid_t pid_ = -1;
};

std::string random_bytes(size_t n, unsigned seed) {
  std::mt19937 g(seed);
  std::string s(n, '\0');
  for (auto& c : s) c = static_cast<char>(g());
  return s;
}

// Open unlinked files in the temporary directory: file spools.
// Open files in the temp folder that have no name: spool files (O_TMPFILE)
// and anything else of the kind this process holds, such as a here-document
// that the shell which started the test left open as its stdin. Tests count
// the change from their start, the spool files they made.
int unlinked_temp_files() {
  int n = 0;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator("/proc/self/fd", ec)) {
    const std::string target = fs::read_symlink(e.path(), ec).string();
    if (!ec && target.rfind(fs::temp_directory_path().string(), 0) == 0 &&
        target.find("(deleted)") != std::string::npos)
      ++n;
  }
  return n;
}

std::string read_all(const RandomAccessFile& f) {
  std::string s(f.size(), '\0');
  size_t at = 0;
  while (at < s.size()) {
    const size_t k = f.read_at(at, s.data() + at, std::min<size_t>(100000, s.size() - at));
    if (k == 0) break;
    at += k;
  }
  s.resize(at);
  return s;
}

TEST(ShardFileSystem, SpoolsInMemoryStayWithinTheirBoundAndTheRestGoToFiles) {
  const fs::path dir = fs::temp_directory_path() / ("hpct-spool-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  std::vector<std::string> bytes;
  for (int i = 0; i < 4; ++i) {
    bytes.push_back(random_bytes((1 << 20) + 1000 * i, static_cast<unsigned>(i)));
    std::ofstream(dir / ("s" + std::to_string(i)), std::ios::binary) << bytes.back();
  }
  HttpServer server(dir.string());
  ASSERT_TRUE(server.up()) << "python3 -m http.server did not listen within 15 s";
  ShardSourceOptions o;
  o.fetches = 1;
  o.spool_memory = (5 << 20) / 2;  // room for two of the four shards
  const int unlinked_before = unlinked_temp_files();
  ShardFileSystem sfs(o, std::make_shared<ProcessEnv>());
  const std::string base = server.base() + "/s";
  auto requests = [&] { return sfs.stats()[server.base()]["requests"].get<int>(); };

  // Read one after the other, each dropped before the next: the third
  // needs the room of the first (read, held by nobody), so the first goes.
  for (int i = 0; i < 3; ++i) {
    auto f = sfs.open_read(base + std::to_string(i));
    // In place: the same bytes, waited for as read_at waits; none past the end.
    const std::uint64_t n = bytes[i].size();
    const char* v = f->view(1000, static_cast<size_t>(n - 1000));
    ASSERT_NE(v, nullptr);
    EXPECT_EQ(std::string(v, n - 1000), bytes[i].substr(1000)) << "shard " << i;
    EXPECT_EQ(f->view(n - 10, 11), nullptr);
    EXPECT_EQ(read_all(*f), bytes[i]) << "shard " << i;
  }
  EXPECT_EQ(requests(), 3);
  {
    auto f = sfs.open_read(base + "1");  // still in memory: no request
    EXPECT_EQ(read_all(*f), bytes[1]);
  }
  EXPECT_EQ(requests(), 3);
  {
    auto f = sfs.open_read(base + "0");  // was dropped: downloaded again
    EXPECT_EQ(read_all(*f), bytes[0]);
  }
  EXPECT_EQ(requests(), 4);

  // Every spool in memory held by a reader: the next has no room there and
  // goes to a file, read back the same.
  EXPECT_EQ(unlinked_temp_files() - unlinked_before, 0);  // all in memory so far
  auto a = sfs.open_read(base + "0");
  auto b = sfs.open_read(base + "2");
  auto d = sfs.open_read(base + "3");
  EXPECT_EQ(unlinked_temp_files() - unlinked_before, 1);
  EXPECT_EQ(read_all(*d), bytes[3]);
  EXPECT_EQ(read_all(*a), bytes[0]);
  EXPECT_EQ(read_all(*b), bytes[2]);
  EXPECT_EQ(requests(), 6);  // "2" was dropped for "0" above; "3" is new
  fs::remove_all(dir);
}

int threads_of_this_process() {
  int n = 0;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator("/proc/self/task", ec)) {
    (void)e;
    ++n;
  }
  return n;
}

// A file system's fetch thread outlives it a while and runs the next file
// system's downloads: the second one's first shard starts no thread (the
// start was a share of the time to the first sample, docs/data.md).
TEST(ShardFileSystem, AFileSystemsFetchThreadServesTheNextFileSystem) {
  const fs::path dir = fs::temp_directory_path() / ("hpct-kept-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const std::string bytes = random_bytes(300000, 7);
  std::ofstream(dir / "k0", std::ios::binary) << bytes;
  HttpServer server(dir.string());
  ASSERT_TRUE(server.up()) << "python3 -m http.server did not listen within 15 s";
  ShardSourceOptions o;
  o.fetches = 1;
  {
    ShardFileSystem first(o, std::make_shared<ProcessEnv>());
    EXPECT_EQ(read_all(*first.open_read(server.base() + "/k0")), bytes);
  }
  const int before = threads_of_this_process();
  for (int i = 0; i < 3; ++i) {
    ShardFileSystem next(o, std::make_shared<ProcessEnv>());
    EXPECT_EQ(read_all(*next.open_read(server.base() + "/k0")), bytes) << "file system " << i;
    // While it lives (its loop waits for more shards): no thread of its own.
    EXPECT_LE(threads_of_this_process(), before) << "file system " << i;  // fewer: one timed out
  }
  fs::remove_all(dir);
}

// A server that takes connections and never answers: its listening socket
// (the kernel completes the handshake), and accept() to see a request came.
class SilentServer {
 public:
  SilentServer() {
    fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t n = sizeof a;
    if (::bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0 && ::listen(fd_, 8) == 0 &&
        ::getsockname(fd_, reinterpret_cast<sockaddr*>(&a), &n) == 0)
      port_ = ntohs(a.sin_port);
  }
  ~SilentServer() {
    for (int c : conns_) ::close(c);
    ::close(fd_);
  }
  // Waits (at most `bound`) for a client's connection; true when one came.
  bool accept_one(std::chrono::milliseconds bound) {
    pollfd p{fd_, POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(bound.count())) != 1) return false;
    const int c = ::accept(fd_, nullptr, nullptr);
    if (c < 0) return false;
    conns_.push_back(c);
    return true;
  }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_) + "/stuck.tar"; }

 private:
  int fd_ = -1;
  int port_ = -1;
  std::vector<int> conns_;
};

// Downloads run one at a time until a reader needs more: a shard opened
// while the only download in flight is stuck gets a thread of its own
// (HPCT_DATA_FETCHES bounds them); with a bound of 1 it waits its turn.
TEST(ShardFileSystem, AShardOpenedWhileTheDownloadsAreBusyGetsAnotherFetchUpToTheBound) {
  const fs::path dir = fs::temp_directory_path() / ("hpct-grow-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const std::string bytes = random_bytes(300000, 9);
  std::ofstream(dir / "good.tar", std::ios::binary) << bytes;
  HttpServer server(dir.string());
  ASSERT_TRUE(server.up()) << "python3 -m http.server did not listen within 15 s";
  for (int fetches : {2, 1}) {
    SilentServer stuck;
    ShardSourceOptions o;
    o.fetches = fetches;
    o.http.attempts = 1;
    o.http.timeout = Millis(fetches == 1 ? 2000 : 30000);  // the stuck request's end
    ShardFileSystem sfs(o, std::make_shared<ProcessEnv>());
    sfs.will_read({stuck.url(), server.base() + "/good.tar"});
    ASSERT_TRUE(stuck.accept_one(std::chrono::seconds(15)))
        << "the first announced shard was not requested within 15 s";
    const auto t0 = std::chrono::steady_clock::now();
    auto f = sfs.open_read(server.base() + "/good.tar");
    EXPECT_EQ(read_all(*f), bytes);
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (fetches == 2) {
      EXPECT_LT(s, 15.0) << "waited for the stuck download (30 s) instead of a second fetch";
    } else {
      EXPECT_GE(s, 1.5) << "a second download ran although HPCT_DATA_FETCHES is 1";
    }
  }
  fs::remove_all(dir);
}

// A reader waiting for a shard's bytes asks for the kernel's least time
// slice for the wait, and gives the one it had back after it.
TEST(ShortSlice, AWaitingReaderHasTheLeastSliceAndGivesItBack) {
  const std::uint64_t before = ShortSlice::current_ns();
  if (before == 0) GTEST_SKIP() << "this kernel does not report a thread's slice (before 6.12)";
  {
    const ShortSlice waiting;
    EXPECT_EQ(ShortSlice::current_ns(), ShortSlice::kSliceNs);
    // A thread made now (a fetch thread grown during the wait) inherits it,
    // and drops it.
    std::thread other([] {
      EXPECT_EQ(ShortSlice::current_ns(), ShortSlice::kSliceNs);
      ShortSlice::drop_inherited();
      EXPECT_NE(ShortSlice::current_ns(), ShortSlice::kSliceNs);
    });
    other.join();
  }
  EXPECT_EQ(ShortSlice::current_ns(), before);
}

TEST(SpoolMemory, ADroppedSpoolsPagesGoToTheNextThatFitsWithinTheBound) {
  const std::uint64_t bound = 16 << 20;
  std::uint64_t len = 0;
  char* a = SpoolMemory::take(5 << 20, 5 << 20, bound, &len);
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(len, 6u << 20);  // whole 2 MiB pieces
  std::memset(a, 7, 5 << 20);
  const std::uint64_t before = SpoolMemory::kept_bytes();
  SpoolMemory::give(a, len, bound);
  EXPECT_EQ(SpoolMemory::kept_bytes(), before + len);
  // A spool of about the same size gets those very pages back.
  std::uint64_t len2 = 0;
  char* b = SpoolMemory::take((5 << 20) + 1000, (5 << 20) + 1000, bound, &len2);
  EXPECT_EQ(b, a);
  EXPECT_EQ(len2, len);
  EXPECT_EQ(b[100], 7);  // not cleared again
  // A much smaller one does not take them, and fresh memory within the
  // bound leaves kept regions alone; past it, they are released.
  SpoolMemory::give(b, len2, bound);
  std::uint64_t len3 = 0;
  char* c = SpoolMemory::take(1 << 20, 1 << 20, bound, &len3);
  EXPECT_NE(c, b);
  EXPECT_GE(SpoolMemory::kept_bytes(), len);  // b's region is still kept
  std::uint64_t len4 = 0;
  char* d = SpoolMemory::take(12 << 20, 13 << 20, bound, &len4);  // 13 MiB + 6 kept > 16
  ASSERT_NE(d, nullptr);
  EXPECT_NE(d, b);
  EXPECT_LE(SpoolMemory::kept_bytes() + (13u << 20), bound);
  // Given back beyond the bound, a region is unmapped, not kept.
  SpoolMemory::give(d, len4, 1 << 20);
  SpoolMemory::give(c, len3, bound);
  EXPECT_LE(SpoolMemory::kept_bytes(), bound);
}

// Files written into a directory of their own and served from it by
// python3 -m http.server; the directory goes with it.
class ServedFiles {
 public:
  ServedFiles(const std::string& tag, const std::map<std::string, std::string>& files)
      : dir_(fs::temp_directory_path() / ("hpct-" + tag + "-" + std::to_string(::getpid()))) {
    fs::create_directories(dir_);
    for (const auto& [name, bytes] : files) std::ofstream(dir_ / name, std::ios::binary) << bytes;
    server_ = std::make_unique<HttpServer>(dir_.string());
  }
  ~ServedFiles() {
    server_.reset();
    fs::remove_all(dir_);
  }
  bool up() const { return server_->up(); }
  std::string base() const { return server_->base(); }

 private:
  fs::path dir_;
  std::unique_ptr<HttpServer> server_;
};

// Bytes delivered into spools, from the file system's counters.
std::uint64_t bytes_of(ShardFileSystem& sfs, const std::string& source) {
  auto st = sfs.stats();
  return st.contains(source) ? st[source]["bytes"].get<std::uint64_t>() : 0;
}

// A hint's range is what is fetched: a rank whose part of an epoch starts
// mid-shard reads there at once, and the bytes it does not read are not
// downloaded; a read outside the range has them fetched, each byte once.
// (Python's http.server ignores Range: the file system skips and cuts the
// answer, as for any such server; nginx and s3rver answer ranges in
// objstore_test.py.)
TEST(ShardFileSystem, AHintedRangeIsAllThatIsFetchedUntilAReaderWantsMore) {
  const std::string bytes = random_bytes(3 << 20, 5);
  ServedFiles server("range", {{"r.tar", bytes}});
  ASSERT_TRUE(server.up()) << "python3 -m http.server did not listen within 15 s";
  ShardSourceOptions o;
  o.fetches = 1;
  ShardFileSystem sfs(o, std::make_shared<ProcessEnv>());
  const std::string url = server.base() + "/r.tar";
  const std::uint64_t first = 1 << 20, end = 2 << 20;
  sfs.will_read({url}, {ReadRange{first, end}});
  auto f = sfs.open_read(url);
  std::string got(end - first, '\0');
  ASSERT_EQ(f->read_at(first, got.data(), got.size()), got.size());
  EXPECT_EQ(got, bytes.substr(first, end - first));
  // Parked at the range's end: nothing more comes while nobody asks.
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  EXPECT_EQ(bytes_of(sfs, server.base()), end - first);
  // Before the range and after it: fetched now, on from where it stopped.
  char head[100], tail[100];
  ASSERT_EQ(f->read_at(10, head, sizeof head), sizeof head);
  EXPECT_EQ(std::string(head, sizeof head), bytes.substr(10, sizeof head));
  ASSERT_EQ(f->read_at(bytes.size() - 100, tail, sizeof tail), sizeof tail);
  EXPECT_EQ(std::string(tail, sizeof tail), bytes.substr(bytes.size() - 100));
  EXPECT_EQ(read_all(*f), bytes);
  EXPECT_EQ(bytes_of(sfs, server.base()), bytes.size()) << "a byte was fetched twice";
}

// The latest hint is what the readers read next: an earlier hint's shards
// that no reader opened leave the queue and are never requested.
TEST(ShardFileSystem, ALaterHintDropsTheShardsOfAnEarlierOneNoReaderOpened) {
  std::vector<std::string> bytes;
  std::map<std::string, std::string> files;
  for (int i = 0; i < 3; ++i) {
    bytes.push_back(random_bytes(200000 + i, static_cast<unsigned>(20 + i)));
    files["h" + std::to_string(i)] = bytes.back();
  }
  ServedFiles server("hints", files);
  ASSERT_TRUE(server.up()) << "python3 -m http.server did not listen within 15 s";
  SilentServer stuck;  // holds the first fetch thread, so the queue stays as hinted
  ShardSourceOptions o;
  o.fetches = 2;
  o.http.attempts = 1;
  o.http.timeout = Millis(30000);
  ShardFileSystem sfs(o, std::make_shared<ProcessEnv>());
  const std::string base = server.base() + "/h";
  sfs.will_read({stuck.url(), base + "0", base + "1"});
  ASSERT_TRUE(stuck.accept_one(std::chrono::seconds(15)))
      << "the first announced shard was not requested within 15 s";
  sfs.will_read({base + "2"});
  EXPECT_EQ(read_all(*sfs.open_read(base + "2")), bytes[2]);
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  EXPECT_EQ(sfs.stats()[server.base()]["requests"].get<int>(), 1) << "an earlier hint's shard was fetched";
  // Opened later, such a shard is fetched then.
  EXPECT_EQ(read_all(*sfs.open_read(base + "0")), bytes[0]);
  EXPECT_EQ(sfs.stats()[server.base()]["requests"].get<int>(), 2);
}

// A shard of which a few bytes were read from its start (the model's probe
// reads one sample) and which a hint then wants from its middle is fetched
// from there, not on from the start.
TEST(ShardFileSystem, AShardBarelyReadIsFetchedAgainFromWhereTheNextHintStarts) {
  const std::string bytes = random_bytes(4 << 20, 6);
  ServedFiles server("restart", {{"p.tar", bytes}});
  ASSERT_TRUE(server.up()) << "python3 -m http.server did not listen within 15 s";
  ShardSourceOptions o;
  o.fetches = 1;
  ShardFileSystem sfs(o, std::make_shared<ProcessEnv>());
  const std::string url = server.base() + "/p.tar";
  {
    sfs.will_read({url}, {ReadRange{0, 10000}});
    auto probe = sfs.open_read(url);
    char b[5000];
    ASSERT_EQ(probe->read_at(2000, b, sizeof b), sizeof b);
    EXPECT_EQ(std::string(b, sizeof b), bytes.substr(2000, sizeof b));
  }
  const std::uint64_t mid = 3 << 20;
  sfs.will_read({url}, {ReadRange{mid, bytes.size()}});
  auto f = sfs.open_read(url);
  std::string got(bytes.size() - mid, '\0');
  ASSERT_EQ(f->read_at(mid, got.data(), got.size()), got.size());
  EXPECT_EQ(got, bytes.substr(mid));
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  EXPECT_EQ(bytes_of(sfs, server.base()), 10000 + bytes.size() - mid);
  EXPECT_EQ(read_all(*f), bytes);
}

TEST(ShardSourceOptions, SpoolMemoryIsASettingAndAFlag) {
  Logger log;
  Config config;
  EXPECT_EQ(shard_source_options(config, log).spool_memory, 1ull << 30);  // the default, 1G
  config.set("HPCT_DATA_SPOOL_MEMORY", "256M", ConfigSource::kEnv);
  EXPECT_EQ(shard_source_options(config, log).spool_memory, 256ull << 20);
  config.set("HPCT_DATA_SPOOL_MEMORY", "0", ConfigSource::kFlag);  // every shard to a file
  EXPECT_EQ(shard_source_options(config, log).spool_memory, 0u);
  config.set("HPCT_DATA_SPOOL_MEMORY", "lots", ConfigSource::kFlag);
  try {
    shard_source_options(config, log);
    FAIL() << "a spool bound of 'lots' was taken";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("HPCT_DATA_SPOOL_MEMORY (--spool-memory)"),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace hpct::data
