// FlightDump (flight_record.h): writing a rank's record on request and on
// SIGUSR1.
//
// SIGUSR1 is process-wide, so its handler is too: installed once, only when
// the program left SIGUSR1 at its default (a program's own handler stays),
// it writes a byte to a pipe; one watcher thread reads the pipe and asks
// every live FlightDump of the process (several ranks live in one test
// process) for a write.
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <mutex>

#include "core/error.h"
#include "engine/flight_record.h"

namespace hpct::engine {
namespace {

int g_signal_pipe[2] = {-1, -1};
std::mutex g_dumps_mu;
std::vector<FlightDump*> g_dumps;  // GUARDED_BY(g_dumps_mu)

extern "C" void on_dump_signal(int) {
  const int saved = errno;
  const char b = 1;
  (void)!::write(g_signal_pipe[1], &b, 1);  // non-blocking: a full pipe already holds a request
  errno = saved;
}

void watch_dump_signals() {
  char buf[64];
  while (true) {
    const ssize_t n = ::read(g_signal_pipe[0], buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;
    std::lock_guard<std::mutex> lk(g_dumps_mu);
    for (FlightDump* d : g_dumps) d->request("SIGUSR1");
  }
}

void install_dump_signal_once() {
  static std::once_flag once;
  std::call_once(once, [] {
    struct sigaction old {};
    if (::sigaction(SIGUSR1, nullptr, &old) != 0 || old.sa_handler != SIG_DFL) return;
    if (::pipe2(g_signal_pipe, O_CLOEXEC) != 0) return;
    ::fcntl(g_signal_pipe[1], F_SETFL, O_NONBLOCK);
    std::thread(watch_dump_signals).detach();  // lives as long as the process
    struct sigaction sa {};
    sa.sa_handler = on_dump_signal;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART;
    ::sigaction(SIGUSR1, &sa, nullptr);
  });
}

void make_dir(const std::string& path) {
  if (::mkdir(path.c_str(), 0755) != 0 && errno != EEXIST) {
    throw_io("cannot create " + path + " for the flight record", errno);
  }
}

}  // namespace

FlightDump::FlightDump(const FlightRecord& record, std::string dir, FlightIdentity who)
    : record_(record), dir_(std::move(dir)), who_(std::move(who)) {
  thread_ = std::thread([this] { run(); });
  install_dump_signal_once();
  std::lock_guard<std::mutex> lk(g_dumps_mu);
  g_dumps.push_back(this);
}

FlightDump::~FlightDump() {
  {
    std::lock_guard<std::mutex> lk(g_dumps_mu);
    g_dumps.erase(std::remove(g_dumps.begin(), g_dumps.end(), this), g_dumps.end());
  }
  {
    std::lock_guard<std::mutex> lk(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

std::string FlightDump::path() const { return dir_ + "/flight/rank-" + std::to_string(who_.rank) + ".json"; }

void FlightDump::request(const std::string& reason) {
  {
    std::lock_guard<std::mutex> lk(mu_);
    if (pending_reason_.empty()) pending_reason_ = reason;
  }
  cv_.notify_all();
}

void FlightDump::write_now(const std::string& reason) {
  std::lock_guard<std::mutex> wl(write_mu_);
  const std::string text = flight_record_json(record_.snapshot(), who_, reason);
  make_dir(dir_);
  make_dir(dir_ + "/flight");
  const std::string final_path = path();
  const std::string tmp = final_path + ".tmp" + std::to_string(::getpid());
  FILE* f = std::fopen(tmp.c_str(), "w");
  if (f == nullptr) throw_io("cannot write the flight record " + tmp, errno);
  const bool ok = std::fwrite(text.data(), 1, text.size(), f) == text.size();
  const int err = errno;
  if (std::fclose(f) != 0 || !ok) {
    ::unlink(tmp.c_str());
    throw_io("cannot write the flight record " + tmp, ok ? errno : err);
  }
  if (::rename(tmp.c_str(), final_path.c_str()) != 0) {
    ::unlink(tmp.c_str());
    throw_io("cannot rename the flight record to " + final_path, errno);
  }
  written_.fetch_add(1);
}

// Writes each requested record; the last request is written before it stops.
void FlightDump::run() {
  std::unique_lock<std::mutex> lk(mu_);
  while (true) {
    cv_.wait(lk, [&] { return stop_ || !pending_reason_.empty(); });
    if (!pending_reason_.empty()) {
      const std::string reason = std::move(pending_reason_);
      pending_reason_.clear();
      lk.unlock();
      try {
        write_now(reason);
      } catch (const std::exception& e) {
        std::fprintf(stderr, "hpctrain: rank %d: %s\n", who_.rank, e.what());
      }
      lk.lock();
      continue;
    }
    if (stop_) return;
  }
}

}  // namespace hpct::engine
