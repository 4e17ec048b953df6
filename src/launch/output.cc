#include "launch/output.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>

#include "core/error.h"
#include "net/socket.h"

namespace hpct::launch {

OutputPrefix parse_output_prefix(const std::string& name) {
  if (name == "none") return OutputPrefix::kNone;
  if (name == "rank") return OutputPrefix::kRank;
  if (name == "host") return OutputPrefix::kHost;
  throw_invalid_argument("--prefix " + name + ": choose none, rank or host");
}

OutputMux::OutputMux(OutputPrefix prefix, std::vector<std::string> host_by_rank,
                     const std::string& output_dir, int stdout_fd, int stderr_fd,
                     size_t tail_lines)
    : prefix_(prefix),
      hosts_(std::move(host_by_rank)),
      stdout_fd_(stdout_fd),
      stderr_fd_(stderr_fd),
      tail_lines_(tail_lines),
      tails_(hosts_.size()) {
  if (output_dir.empty()) return;
  if (::mkdir(output_dir.c_str(), 0755) != 0 && errno != EEXIST) {
    throw_io("cannot create output directory " + output_dir, errno);
  }
  output_dir_ = output_dir;
  const std::string log = output_dir + "/launcher.log";
  launcher_log_ = UniqueFd(::open(log.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644));
  if (!launcher_log_.valid()) throw_io("cannot create " + log, errno);
  for (size_t r = 0; r < hosts_.size(); ++r) open_files(r);
}

void OutputMux::open_files(size_t r) {
  std::string dir = output_dir_ + "/rank." + std::to_string(r);
  if (::mkdir(dir.c_str(), 0755) != 0 && errno != EEXIST) throw_io("cannot create " + dir, errno);
  for (const char* name : {"stdout", "stderr"}) {
    std::string path = dir + "/" + name;
    int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_APPEND, 0644);
    if (fd < 0) throw_io("cannot create " + path, errno);
    files_.emplace_back(fd);
  }
}

int OutputMux::add_rank(const std::string& host) {
  hosts_.push_back(host);
  tails_.emplace_back();
  if (!output_dir_.empty()) open_files(hosts_.size() - 1);
  return static_cast<int>(hosts_.size()) - 1;
}

std::string OutputMux::prefix(int rank) const {
  switch (prefix_) {
    case OutputPrefix::kNone: return "";
    case OutputPrefix::kRank: return "[" + std::to_string(rank) + "] ";
    case OutputPrefix::kHost: return "[" + hosts_.at(static_cast<size_t>(rank)) + ":" + std::to_string(rank) + "] ";
  }
  return "";
}

void OutputMux::rank_line(int rank, bool is_stderr, const std::string& text) {
  if (rank < 0 || static_cast<size_t>(rank) >= hosts_.size()) {
    spawner_line("rank " + std::to_string(rank) + "?", is_stderr, text);
    return;
  }
  net::try_write_all(is_stderr ? stderr_fd_ : stdout_fd_, prefix(rank) + text + "\n");
  if (!files_.empty()) net::try_write_all(files_[static_cast<size_t>(rank) * 2 + (is_stderr ? 1 : 0)].get(), text + "\n");
  if (is_stderr) {
    auto& tail = tails_[static_cast<size_t>(rank)];
    tail.push_back(text);
    if (tail.size() > tail_lines_) tail.pop_front();
  }
}

void OutputMux::spawner_line(const std::string& source, bool is_stderr, const std::string& text) {
  net::try_write_all(is_stderr ? stderr_fd_ : stdout_fd_, "[" + source + "] " + text + "\n");
}

void OutputMux::launcher_line(const std::string& text) {
  net::try_write_all(stderr_fd_, "hpctrain launch: " + text + "\n");
  if (launcher_log_.valid()) {
    // Unix seconds first: `hpctrain report` puts restarts and membership
    // changes on the run's timeline with them.
    char stamp[32];
    const double now =
        std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
    std::snprintf(stamp, sizeof stamp, "%.3f ", now);
    net::try_write_all(launcher_log_.get(), stamp + text + "\n");
  }
}

const std::deque<std::string>& OutputMux::stderr_tail(int rank) const {
  return tails_.at(static_cast<size_t>(rank));
}

void OutputMux::set_host(int rank, const std::string& host) {
  if (rank >= 0 && static_cast<size_t>(rank) < hosts_.size()) hosts_[static_cast<size_t>(rank)] = host;
}

}  // namespace hpct::launch
