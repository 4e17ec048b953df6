// The Store contract (store.h), one parameterised suite run over every
// implementation: memory, file and tcp (a real server on loopback). Each
// case opens clients of one store through the parameter's factory, so
// "another client" is another object on the same data: the same
// MemoryStore, a second FileStore on the same directory, a second TcpStore
// connection. What only one implementation does (file names for keys, locks
// across processes; the tcp handshake, frames and faults) stays in its own
// *_store_test.cc.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <cstdlib>
#include <functional>
#include <memory>
#include <ostream>
#include <string>
#include <thread>

#include "core/error.h"
#include "store/file_store.h"
#include "store/memory_store.h"
#include "store/tcp_store.h"

namespace hpct::store {
namespace {

// One store under test: open() gives a new client of the same store.
class StoreUnderTest {
 public:
  virtual ~StoreUnderTest() = default;
  virtual std::shared_ptr<Store> open() = 0;
};

class MemoryUnderTest final : public StoreUnderTest {
 public:
  std::shared_ptr<Store> open() override { return store_; }

 private:
  std::shared_ptr<MemoryStore> store_ = std::make_shared<MemoryStore>();
};

// A fresh directory under the test's temp dir, removed afterwards.
class FileUnderTest final : public StoreUnderTest {
 public:
  FileUnderTest() {
    std::string tmpl = ::testing::TempDir() + "hpct_store_contract_XXXXXX";
    if (::mkdtemp(tmpl.data()) == nullptr) throw std::runtime_error("mkdtemp failed under " + ::testing::TempDir());
    dir_ = tmpl;
  }
  ~FileUnderTest() override { (void)std::system(("rm -rf '" + dir_ + "'").c_str()); }
  std::shared_ptr<Store> open() override { return std::make_shared<FileStore>(dir_); }

 private:
  std::string dir_;
};

class TcpUnderTest final : public StoreUnderTest {
 public:
  TcpUnderTest() : server_(server_options()) {}
  std::shared_ptr<Store> open() override {
    TcpStoreOptions o;
    o.port = server_.port();
    o.secret = kSecret;
    o.connect_timeout = Millis(3000);
    o.io_timeout = Millis(3000);
    return std::make_shared<TcpStore>(o);
  }

 private:
  static constexpr const char* kSecret = "0123456789abcdef-contract-secret";
  static TcpStoreServerOptions server_options() {
    TcpStoreServerOptions o;
    o.secret = kSecret;
    o.logger = Logger(LogLevel::kError, "all", -1, [](const std::string&) {});
    return o;
  }
  TcpStoreServer server_;
};

struct StoreKind {
  std::string name;
  std::function<std::unique_ptr<StoreUnderTest>()> make;
};
// CTest's names show the store's name, not the struct's bytes.
void PrintTo(const StoreKind& k, std::ostream* os) { *os << k.name; }

class StoreContract : public ::testing::TestWithParam<StoreKind> {
 protected:
  void SetUp() override { under_test_ = GetParam().make(); }
  std::shared_ptr<Store> open() { return under_test_->open(); }
  std::unique_ptr<StoreUnderTest> under_test_;
};

TEST_P(StoreContract, SetGetAddRemove) {
  auto s = open();
  s->set("a", std::string("x\0y", 3));
  EXPECT_EQ(s->get("a", Millis(100)), std::string("x\0y", 3));
  s->set("a", "");
  EXPECT_EQ(s->get("a", Millis(100)), "");
  EXPECT_EQ(s->add("n", 2), 2);
  EXPECT_EQ(s->add("n", -5), -3);
  EXPECT_TRUE(s->check({"a", "n"}));
  EXPECT_TRUE(s->remove("a"));
  EXPECT_FALSE(s->remove("a"));
  EXPECT_FALSE(s->check({"a"}));
  s->set("text", "hello");
  try {
    s->add("text", 1);
    FAIL() << "add() on a text value did not throw";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("not an integer"), std::string::npos) << e.what();
  }
  EXPECT_EQ(s->get("text", Millis(100)), "hello");  // the value is kept
}

TEST_P(StoreContract, MissingListsTheAbsentKeysAfterItsWait) {
  auto s = open();
  s->set("b", "1");
  EXPECT_EQ(s->missing({"a", "b", "c"}, Millis(0)), (std::vector<std::string>{"a", "c"}));
  std::thread t([&] {
    std::this_thread::sleep_for(Millis(30));
    open()->set("a", "v");
  });
  EXPECT_EQ(s->missing({"a", "b", "c"}, Millis(300)), std::vector<std::string>{"c"});
  t.join();
  EXPECT_TRUE(s->missing({"a", "b"}, Millis(0)).empty());
}

TEST_P(StoreContract, GetWaitsForAnotherClient) {
  auto s = open();
  std::thread t([&] {
    std::this_thread::sleep_for(Millis(30));
    open()->set("late", "v");
  });
  EXPECT_EQ(s->get("late", Millis(5000)), "v");
  t.join();
}

TEST_P(StoreContract, WaitTimesOutNamingMissingKeys) {
  auto s = open();
  s->set("here", "1");
  auto start = SteadyClock::now();
  try {
    s->wait({"here", "absent"}, Millis(80));
    FAIL() << "no timeout";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kTimeout);
    EXPECT_NE(std::string(e.what()).find("missing: absent"), std::string::npos) << e.what();
  }
  auto took = SteadyClock::now() - start;
  EXPECT_GE(took, Millis(80));
  EXPECT_LT(took, Millis(2000));
  EXPECT_THROW(s->get("absent", Millis(10)), Error);
}

TEST_P(StoreContract, PrefixStoreKeysAreNamespaced) {
  auto inner = open();
  PrefixStore a("job1", inner), b("job2", inner);
  a.set("k", "1");
  b.set("k", "2");
  EXPECT_EQ(a.get("k", Millis(10)), "1");
  EXPECT_EQ(b.get("k", Millis(10)), "2");
  EXPECT_EQ(open()->get("job2/k", Millis(1000)), "2");
  EXPECT_EQ(a.missing({"k", "gone"}, Millis(0)), std::vector<std::string>{"gone"});
  try {
    a.wait({"gone"}, Millis(20));
    FAIL() << "no timeout";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("missing: gone)"), std::string::npos) << e.what();
  }
}

INSTANTIATE_TEST_SUITE_P(
    AllStores, StoreContract,
    ::testing::Values(StoreKind{"memory", [] { return std::unique_ptr<StoreUnderTest>(new MemoryUnderTest); }},
                      StoreKind{"file", [] { return std::unique_ptr<StoreUnderTest>(new FileUnderTest); }},
                      StoreKind{"tcp", [] { return std::unique_ptr<StoreUnderTest>(new TcpUnderTest); }}),
    [](const ::testing::TestParamInfo<StoreKind>& info) { return info.param.name; });

}  // namespace
}  // namespace hpct::store
