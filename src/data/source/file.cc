#include "data/source/file.h"

#include <fcntl.h>
#include <glob.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <filesystem>

#include "core/error.h"
#include "core/fd.h"
#include "net/socket.h"

namespace hpct::data {
namespace {

class PosixRandomAccessFile final : public RandomAccessFile {
 public:
  PosixRandomAccessFile(UniqueFd fd, std::uint64_t size, std::string name)
      : fd_(std::move(fd)), size_(size), name_(std::move(name)) {}

  size_t read_at(std::uint64_t offset, char* buf, size_t n) const override {
    size_t done = 0;
    while (done < n) {
      ssize_t r = ::pread(fd_.get(), buf + done, n - done, static_cast<off_t>(offset + done));
      if (r < 0) {
        if (errno == EINTR) continue;
        throw_io("read " + name_ + " at byte offset " + std::to_string(offset + done), errno);
      }
      if (r == 0) break;
      done += static_cast<size_t>(r);
    }
    return done;
  }
  std::uint64_t size() const override { return size_; }
  const std::string& name() const override { return name_; }

 private:
  UniqueFd fd_;
  std::uint64_t size_;
  std::string name_;
};

class PosixWritableFile final : public WritableFile {
 public:
  PosixWritableFile(UniqueFd fd, std::string tmp, std::string name)
      : fd_(std::move(fd)), tmp_(std::move(tmp)), name_(std::move(name)) {}
  ~PosixWritableFile() override {
    if (!committed_) {
      fd_.reset();
      ::unlink(tmp_.c_str());
    }
  }

  void append(std::string_view bytes) override {
    net::write_all(fd_.get(), bytes.data(), bytes.size(), net::kNoDeadline, -1, name_);
  }
  void commit() override {
    if (::fsync(fd_.get()) != 0) throw_io("fsync " + name_, errno);
    fd_.reset();
    if (::rename(tmp_.c_str(), name_.c_str()) != 0) throw_io("rename " + tmp_ + " to " + name_, errno);
    committed_ = true;
  }
  const std::string& name() const override { return name_; }

 private:
  UniqueFd fd_;
  std::string tmp_;
  std::string name_;
  bool committed_ = false;
};

}  // namespace

std::unique_ptr<RandomAccessFile> PosixFileSystem::open_read(const std::string& path) {
    UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
    if (!fd.valid()) throw_io("open " + path, errno);
    struct stat st {};
    if (::fstat(fd.get(), &st) != 0) throw_io("stat " + path, errno);
    return std::make_unique<PosixRandomAccessFile>(std::move(fd), static_cast<std::uint64_t>(st.st_size),
                                                   path);
}

std::unique_ptr<WritableFile> PosixFileSystem::open_write(const std::string& path) {
    std::filesystem::path p(path);
    if (p.has_parent_path()) {
      std::error_code ec;
      std::filesystem::create_directories(p.parent_path(), ec);
      if (ec) throw_io("create directory " + p.parent_path().string(), ec.value());
    }
    std::string tmp = path + ".tmp-" + std::to_string(::getpid());
    UniqueFd fd(::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
    if (!fd.valid()) throw_io("create " + tmp, errno);
    return std::make_unique<PosixWritableFile>(std::move(fd), tmp, path);
}

std::vector<std::string> FileSystem::glob(const std::string& pattern) {
  glob_t g{};
  std::vector<std::string> out;
  const int rc = ::glob(pattern.c_str(), 0, nullptr, &g);
  if (rc == 0) {
    for (size_t i = 0; i < g.gl_pathc; ++i) out.emplace_back(g.gl_pathv[i]);
  }
  ::globfree(&g);
  return out;  // glob sorts
}

std::string read_whole_file(FileSystem& fs, const std::string& path) {
  auto f = fs.open_read(path);
  std::string out(f->size(), '\0');
  size_t n = f->read_at(0, out.data(), out.size());
  out.resize(n);
  return out;
}

}  // namespace hpct::data
