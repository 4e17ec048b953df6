#include "store/secret.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include "core/error.h"

namespace hpct::store {
namespace {

// A pipe whose write end holds `content` and is then closed (or kept open).
struct Pipe {
  explicit Pipe(const std::string& content, bool close_writer = true) {
    EXPECT_EQ(::pipe(fds), 0);
    EXPECT_EQ(::write(fds[1], content.data(), content.size()),
              static_cast<ssize_t>(content.size()));
    if (close_writer) close_write();
  }
  ~Pipe() {
    ::close(fds[0]);
    close_write();
  }
  void close_write() {
    if (fds[1] >= 0) ::close(fds[1]);
    fds[1] = -1;
  }
  int fds[2] = {-1, -1};
};

TEST(Secret, GenerateGivesFreshHex) {
  const std::string a = generate_secret(), b = generate_secret();
  EXPECT_EQ(a.size(), 64u);
  EXPECT_EQ(a.find_first_not_of("0123456789abcdef"), std::string::npos);
  EXPECT_NE(a, b);
}

TEST(Secret, ReadTrimsTheNewline) {
  EXPECT_EQ(read_secret_from_fd(Pipe("abc\n").fds[0]), "abc");
  EXPECT_EQ(read_secret_from_fd(Pipe("abc\r\n").fds[0]), "abc");
  EXPECT_EQ(read_secret_from_fd(Pipe("no-newline").fds[0]), "no-newline");
  Pipe two_lines("first\nsecond\n");
  EXPECT_EQ(read_secret_from_fd(two_lines.fds[0]), "first");
  EXPECT_EQ(read_secret_from_fd(two_lines.fds[0]), "second");
  // The writer keeps the pipe open: the newline ends the read.
  Pipe open_writer("line\n", false);
  EXPECT_EQ(read_secret_from_fd(open_writer.fds[0], Millis(100)), "line");
}

TEST(Secret, EmptyTooLongSilentOrBadFdAreClearErrors) {
  auto expect_error = [](int fd, Millis timeout, ErrorCode code, const std::string& words) {
    try {
      read_secret_from_fd(fd, timeout);
      FAIL() << words;
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), code) << e.what();
      EXPECT_NE(std::string(e.what()).find(words), std::string::npos) << e.what();
    }
  };
  Pipe empty("");
  expect_error(empty.fds[0], Millis(100), ErrorCode::kInvalidArgument, "is empty");
  Pipe newline_only("\n");
  expect_error(newline_only.fds[0], Millis(100), ErrorCode::kInvalidArgument, "is empty");
  Pipe long_secret(std::string(5000, 'a'));
  expect_error(long_secret.fds[0], Millis(1000), ErrorCode::kInvalidArgument, "longer than");
  Pipe silent("", false);
  expect_error(silent.fds[0], Millis(50), ErrorCode::kTimeout,
               "fd " + std::to_string(silent.fds[0]));
  expect_error(-1, Millis(50), ErrorCode::kInvalidArgument, "fd -1");
}

}  // namespace
}  // namespace hpct::store
