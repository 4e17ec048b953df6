#include "store/file_store.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/file.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <set>
#include <thread>

#include "core/error.h"

namespace hpct::store {
namespace {

// A fresh directory under the test's temp dir, removed afterwards.
class FileStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = ::testing::TempDir() + "hpct_file_store_XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override {
    std::string cmd = "rm -rf '" + dir_ + "'";
    ASSERT_EQ(std::system(cmd.c_str()), 0);
  }
  std::string dir_;
};

// The contract every store keeps (set, get, add, wait, remove) is
// store_contract_test.cc; here what only the file store does.

// Its error for add() on a value that is no integer is hpct::Error.
TEST_F(FileStoreTest, AddToATextValueIsAnHpctError) {
  FileStore s(dir_);
  s.set("text", "hello");
  EXPECT_THROW(s.add("text", 1), Error);
}

TEST_F(FileStoreTest, KeysWithSlashesAndBinaryBytes) {
  FileStore s(dir_);
  std::vector<std::string> keys = {"a/b",
                                   "../escape",
                                   "/abs",
                                   ".",
                                   "..",
                                   "",
                                   std::string("\0\xff\n", 3),
                                   "a%2Fb",
                                   "A",
                                   "a",
                                   std::string(300, '/'),
                                   std::string(301, '/')};
  for (size_t i = 0; i < keys.size(); ++i) s.set(keys[i], "v" + std::to_string(i));
  for (size_t i = 0; i < keys.size(); ++i)
    EXPECT_EQ(s.get(keys[i], Millis(100)), "v" + std::to_string(i)) << i;
  std::set<std::string> names;
  for (const auto& k : keys) {
    std::string n = FileStore::file_name_for_key(k);
    EXPECT_EQ(n.find('/'), std::string::npos);
    EXPECT_LE(n.size(), 255u);
    names.insert(n);
  }
  EXPECT_EQ(names.size(), keys.size());
  // Nothing escaped the directory.
  EXPECT_FALSE(FileStore(dir_ + "/..").check({"escape"}));
}

TEST_F(FileStoreTest, NotADirectoryIsAnIoError) {
  FileStore(dir_).set("x", "y");
  try {
    FileStore bad(dir_ + "/" + FileStore::file_name_for_key("x"));
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kIo) << e.what();
  }
}

// Forked processes: each adds to a shared counter many times and announces
// itself; the parent checks the exact total and every announcement.
TEST_F(FileStoreTest, AddIsAtomicAcrossForkedProcesses) {
  constexpr int kProcs = 4;
  constexpr int kAdds = 50;
  std::vector<pid_t> pids;
  for (int p = 0; p < kProcs; ++p) {
    pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      int rc = 0;
      try {
        FileStore s(dir_);
        s.get("go", Millis(10000));
        for (int i = 0; i < kAdds; ++i) s.add("counter", 1);
        s.set("done/" + std::to_string(p), std::to_string(::getpid()));
      } catch (...) {
        rc = 1;
      }
      ::_exit(rc);
    }
    pids.push_back(pid);
  }
  FileStore s(dir_);
  s.set("go", "1");
  std::vector<std::string> done;
  for (int p = 0; p < kProcs; ++p) done.push_back("done/" + std::to_string(p));
  s.wait(done, Millis(20000));
  for (pid_t pid : pids) {
    int status = 0;
    ASSERT_EQ(::waitpid(pid, &status, 0), pid);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  }
  EXPECT_EQ(s.add("counter", 0), kProcs * kAdds);
  EXPECT_EQ(s.get("done/0", Millis(10)), std::to_string(pids[0]));
}

TEST_F(FileStoreTest, AddGivesUpWhenTheLockIsHeld) {
  FileStore s(dir_, Millis(60));
  // Another open file description holds the lock, as a frozen process would.
  int fd = ::open((dir_ + "/.lock").c_str(), O_RDWR | O_CREAT, 0600);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::flock(fd, LOCK_EX), 0);
  auto start = SteadyClock::now();
  try {
    s.add("k", 1);
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kTimeout);
    EXPECT_NE(std::string(e.what()).find("add(k)"), std::string::npos) << e.what();
  }
  EXPECT_LT(SteadyClock::now() - start, Millis(2000));
  ::close(fd);
  EXPECT_EQ(s.add("k", 1), 1);
}

}  // namespace
}  // namespace hpct::store
