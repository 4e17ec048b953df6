// Real Fashion-MNIST (Debian's dataset-fashion-mnist) packed into tar shards
// by `hpctrain data pack`, as a user packs them: the one fixture the suites
// that train or serve on shards share. The shards are DIR/fm-000000.tar,
// DIR/fm-000001.tar, ..., `per_shard` samples each, in the split's order.
// The calling target defines HPCT_BINARY (the hpctrain under test).
#pragma once

#include <stdlib.h>

#include <cstdio>
#include <filesystem>
#include <string>
#include <utility>

#include "shell_run.h"

namespace hpct::test {

class FashionShards {
 public:
  // Packs into a fresh directory TMPDIR/TAG-XXXXXX, removed with this object.
  static FashionShards in_temp_dir(const std::string& tag, int per_shard, const std::string& split = "test") {
    std::string tmpl = (std::filesystem::temp_directory_path() / (tag + "-XXXXXX")).string();
    if (::mkdtemp(tmpl.data()) == nullptr) {
      FashionShards none("", false);
      none.out_ = "cannot make a directory like " + tmpl;
      return none;
    }
    FashionShards s(tmpl, true);
    s.pack(per_shard, split);
    return s;
  }

  // Packs into dir (made when missing), left in place: for a directory that
  // something else removes (a namespace cluster's state directory).
  static FashionShards in_dir(const std::string& dir, int per_shard, const std::string& split = "test") {
    std::error_code ec;
    std::filesystem::create_directories(dir, ec);
    FashionShards s(dir, false);
    s.pack(per_shard, split);
    return s;
  }

  FashionShards(FashionShards&& o) noexcept
      : dir_(std::move(o.dir_)), owned_(std::exchange(o.owned_, false)), exit_code_(o.exit_code_),
        out_(std::move(o.out_)) {}
  FashionShards& operator=(FashionShards&& o) noexcept {
    remove();
    dir_ = std::move(o.dir_);
    owned_ = std::exchange(o.owned_, false);
    exit_code_ = o.exit_code_;
    out_ = std::move(o.out_);
    return *this;
  }
  FashionShards(const FashionShards&) = delete;
  FashionShards& operator=(const FashionShards&) = delete;
  ~FashionShards() { remove(); }

  // True when `data pack` succeeded; else output() says why.
  bool ok() const { return exit_code_ == 0; }
  const std::string& output() const { return out_; }
  const std::string& dir() const { return dir_; }

  // DIR/fm-00000I.tar
  std::string shard(int i) const {
    char name[32];
    std::snprintf(name, sizeof name, "/fm-%06d.tar", i);
    return dir_ + name;
  }
  // The brace pattern of shards first..last, as --data takes it (quote it
  // for the shell): DIR/fm-{000000..000002}.tar
  std::string range(int first, int last) const {
    char name[48];
    std::snprintf(name, sizeof name, "/fm-{%06d..%06d}.tar", first, last);
    return dir_ + name;
  }

 private:
  FashionShards(std::string dir, bool owned) : dir_(std::move(dir)), owned_(owned) {}

  void pack(int per_shard, const std::string& split) {
    ShellResult r = run_shell(std::string("timeout 300 ") + HPCT_BINARY + " data pack --from fashion-mnist --split " +
                              split + " -q --max-count " + std::to_string(per_shard) + " -o '" + dir_ +
                              "/fm-%06d.tar' 2>&1");
    exit_code_ = r.exit_code;
    out_ = std::move(r.out);
  }
  void remove() {
    if (!owned_) return;
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
    owned_ = false;
  }

  std::string dir_;
  bool owned_ = false;
  int exit_code_ = -1;
  std::string out_;
};

}  // namespace hpct::test
