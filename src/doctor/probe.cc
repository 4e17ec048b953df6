#include "doctor/probe.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <fstream>
#include <mutex>
#include <sstream>
#include <thread>

#include "core/clock.h"
#include "core/error.h"
#include "doctor/net.h"
#include "net/socket.h"

namespace hpct::doctor {
namespace {

constexpr int kMaxPorts = 64;
constexpr size_t kMaxHandlers = 32;  // concurrent connections a listener serves
constexpr Millis kHandlerIo(5000);   // a listener's bound on each write (and SO_RCVTIMEO)
constexpr Millis kProbeIo(3000);     // a probe's bound on each write (and connect_one)

// Listeners on the port range, served by one accept thread; each accepted
// connection gets a short-lived thread (bounded in count and time). The
// first byte says what the peer wants: none (EOF) for a reachability check,
// 'p' for 1-byte echo round trips, 'b' for a bulk send answered with the
// byte count. Not copyable; stop() (or the destructor) joins every thread.
class PairListener {
 public:
  explicit PairListener(const PortRange& range) {
    std::vector<int> wanted;
    if (range.ephemeral()) wanted = {0, 0};
    for (int p = range.lo; !range.ephemeral() && p <= range.hi; ++p) wanted.push_back(p);
    for (int p : wanted) {
      int bound = 0;
      std::string error;
      UniqueFd fd = listen_on(p, &bound, &error);
      if (fd.valid()) {
        ports_.push_back(bound);
        fds_.push_back(std::move(fd));
      } else {
        errors_.push_back(error);
      }
    }
    if (::pipe2(wake_, O_CLOEXEC) != 0) throw_io("pipe", errno);
    thread_ = std::thread([this] { serve(); });
  }
  PairListener(const PairListener&) = delete;
  PairListener& operator=(const PairListener&) = delete;
  ~PairListener() { stop(); }

  const std::vector<int>& ports() const { return ports_; }
  const std::vector<std::string>& errors() const { return errors_; }

  void stop() {
    if (!thread_.joinable()) return;
    stopping_ = true;
    (void)!::write(wake_[1], "x", 1);
    thread_.join();
    std::vector<std::thread> handlers;
    {
      std::lock_guard<std::mutex> lock(mu_);
      handlers.swap(handlers_);
    }
    for (auto& t : handlers) t.join();  // each ends within its socket timeouts
    ::close(wake_[0]);
    ::close(wake_[1]);
  }

 private:
  void serve() {
    while (!stopping_) {
      std::vector<pollfd> p;
      for (const auto& fd : fds_) p.push_back({fd.get(), POLLIN, 0});
      p.push_back({wake_[0], POLLIN, 0});
      if (::poll(p.data(), p.size(), 1000) <= 0) continue;
      for (size_t i = 0; i + 1 < p.size(); ++i) {
        if (!(p[i].revents & POLLIN)) continue;
        int c = ::accept4(p[i].fd, nullptr, nullptr, SOCK_CLOEXEC);
        if (c < 0) continue;
        UniqueFd conn(c);
        std::lock_guard<std::mutex> lock(mu_);
        if (handlers_.size() >= kMaxHandlers || stopping_) continue;  // closes conn
        handlers_.emplace_back([fd = conn.release(), this] { handle(UniqueFd(fd)); });
      }
    }
  }

  void handle(UniqueFd conn) {
    timeval tv{kHandlerIo.count() / 1000, 0};
    ::setsockopt(conn.get(), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    ::setsockopt(conn.get(), SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    char mode = 0;
    if (!read_all(conn.get(), &mode, 1)) return;  // a reachability check
    if (mode == 'p') {
      char b;
      for (int i = 0; i < 10000 && !stopping_ && read_all(conn.get(), &b, 1); ++i) {
        if (!net::try_write_all(conn.get(), &b, 1, SteadyClock::now() + kHandlerIo)) break;
      }
    } else if (mode == 'b') {
      std::vector<char> buf(1 << 20);
      std::uint64_t total = 0;
      while (!stopping_) {
        ssize_t n = ::read(conn.get(), buf.data(), buf.size());
        if (n <= 0) break;
        total += static_cast<std::uint64_t>(n);
      }
      net::try_write_all(conn.get(), &total, sizeof total, SteadyClock::now() + kHandlerIo);
    }
  }

  std::vector<UniqueFd> fds_;
  std::vector<int> ports_;
  std::vector<std::string> errors_;
  int wake_[2] = {-1, -1};
  std::atomic<bool> stopping_{false};
  std::mutex mu_;
  std::vector<std::thread> handlers_;  // GUARDED_BY(mu_)
  std::thread thread_;
};

void emit(int fd, const nlohmann::json& j) {
  // False when the head is gone; stdin's EOF will end us.
  net::try_write_all(fd, j.dump() + "\n");
}

// Step 3: read the other hosts' tokens, connect to their listeners.
nlohmann::json pair_phase(const ProbeOptions& o, const nlohmann::json& go) {
  nlohmann::json reply = {{"phase", "pairs"}};
  std::vector<int> seen, missing;
  std::string detail;
  Millis timeout = seconds_to_millis(go.value("connect_timeout_s", 2.0));
  std::vector<Endpoint> endpoints;
  std::vector<int> endpoint_host;
  nlohmann::json connects = nlohmann::json::array();
  for (const auto& peer : go.at("peers")) {
    int index = peer.at("index").get<int>();
    if (index == o.index) continue;
    if (!o.shared_dir.empty()) {
      std::ifstream f(token_path(o.shared_dir, o.run_id, index));
      std::stringstream ss;
      ss << f.rdbuf();
      if (f && ss.str() == token_text(o.run_id, index)) {
        seen.push_back(index);
      } else {
        missing.push_back(index);
      }
    }
    std::string error;
    std::string name = peer.at("name").get<std::string>();
    auto addrs = resolve_ipv4(name, &error);
    for (int port : peer.at("ports").get<std::vector<int>>()) {
      if (addrs.empty()) {
        connects.push_back({{"to", index}, {"port", port}, {"ok", false},
                            {"error", "cannot resolve " + name + " here: " + error}});
        continue;
      }
      endpoints.push_back({addrs[0], port});
      endpoint_host.push_back(index);
    }
  }
  auto results = connect_all(endpoints, timeout);
  for (size_t i = 0; i < endpoints.size(); ++i) {
    connects.push_back({{"to", endpoint_host[i]}, {"port", endpoints[i].port},
                        {"ok", results[i].empty()}, {"error", results[i]}});
  }
  reply["connects"] = connects;
  reply["tokens_seen"] = seen;
  reply["tokens_missing"] = missing;
  return reply;
}

// Step 4: round trips and a short bulk send to one peer.
nlohmann::json measure_phase(const nlohmann::json& m) {
  nlohmann::json reply = {{"phase", "measure"}, {"to", m.at("to")}};
  try {
    std::string error;
    std::string name = m.at("name").get<std::string>();
    auto addrs = resolve_ipv4(name, &error);
    if (addrs.empty()) throw_io("resolve " + name + ": " + error, 0);
    Endpoint e{addrs[0], m.at("port").get<int>()};
    {
      UniqueFd fd = connect_one(e, kProbeIo);
      char mode = 'p';
      if (!net::try_write_all(fd.get(), &mode, 1, SteadyClock::now() + kProbeIo)) {
        throw_peer_failure("ping to " + name + " failed");
      }
      std::vector<double> rtts;
      for (int i = 0; i < 50; ++i) {
        auto t0 = SteadyClock::now();
        char b = 1;
        if (!net::try_write_all(fd.get(), &b, 1, SteadyClock::now() + kProbeIo) ||
            !read_all(fd.get(), &b, 1)) {
          throw_peer_failure("ping to " + name + " broke after " + std::to_string(i) + " round trips");
        }
        rtts.push_back(std::chrono::duration<double, std::micro>(SteadyClock::now() - t0).count());
      }
      std::sort(rtts.begin(), rtts.end());
      reply["rtt_us"] = rtts[rtts.size() / 2];
    }
    UniqueFd fd = connect_one(e, kProbeIo);
    char mode = 'b';
    std::vector<char> buf(1 << 20, 7);
    auto t0 = SteadyClock::now();
    bool ok = net::try_write_all(fd.get(), &mode, 1, SteadyClock::now() + kProbeIo);
    // About a quarter second of sending: enough to fill the pipe, short
    // enough that the whole matrix stays quick.
    for (int i = 0; ok && i < 4096 && SteadyClock::now() - t0 < Millis(250); ++i) {
      ok = net::try_write_all(fd.get(), buf.data(), buf.size(), SteadyClock::now() + kProbeIo);
    }
    ::shutdown(fd.get(), SHUT_WR);
    std::uint64_t total = 0;
    if (!ok || !read_all(fd.get(), &total, sizeof total)) throw_peer_failure("bulk send to " + name + " failed");
    double s = std::chrono::duration<double>(SteadyClock::now() - t0).count();
    reply["gbps"] = total * 8.0 / s / 1e9;
  } catch (const Error& e) {
    reply["error"] = e.what();
  }
  return reply;
}

}  // namespace

std::string PortRange::text() const {
  if (ephemeral()) return "ephemeral";
  return lo == hi ? std::to_string(lo) : std::to_string(lo) + "-" + std::to_string(hi);
}

PortRange parse_port_range(const std::string& text) {
  if (text == "ephemeral" || text.empty()) return {};
  auto number = [&](const std::string& s) {
    char* end = nullptr;
    errno = 0;
    long v = std::strtol(s.c_str(), &end, 10);
    if (s.empty() || *end != '\0' || errno != 0 || v < 1 || v > 65535) {
      throw_invalid_argument("--ports " + text + ": '" + s + "' is not a port (1..65535)");
    }
    return static_cast<int>(v);
  };
  auto dash = text.find('-');
  PortRange r;
  r.lo = number(text.substr(0, dash));
  r.hi = dash == std::string::npos ? r.lo : number(text.substr(dash + 1));
  if (r.hi < r.lo) throw_invalid_argument("--ports " + text + ": the range is empty (LO-HI, LO <= HI)");
  if (r.hi - r.lo + 1 > kMaxPorts) {
    throw_invalid_argument("--ports " + text + ": at most " + std::to_string(kMaxPorts) +
                           " ports (every host listens on each one)");
  }
  return r;
}

std::string token_path(const std::string& dir, const std::string& run_id, int index) {
  return dir + "/.hpctrain-doctor-" + run_id + "-" + std::to_string(index);
}

std::string token_text(const std::string& run_id, int index) {
  return "hpctrain doctor " + run_id + " host " + std::to_string(index) + "\n";
}

int run_probe(const ProbeOptions& o, int in_fd, int out_fd) {
  Deadline life(seconds_to_millis(o.lifetime_s));
  HostFacts facts = collect_host_facts(o);
  PairListener listener(o.ports);
  facts.ports = listener.ports();
  facts.port_errors = listener.errors();
  emit(out_fd, {{"phase", "facts"}, {"facts", to_json(facts)}});

  std::string pending;
  bool eof = false;
  while (!eof && !life.expired()) {
    pollfd p{in_fd, POLLIN, 0};
    int n = ::poll(&p, 1, static_cast<int>(std::min<long long>(life.remaining().count(), 1000)));
    if (n <= 0) continue;
    char buf[65536];
    ssize_t r = ::read(in_fd, buf, sizeof buf);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) {
      eof = true;
      break;
    }
    pending.append(buf, static_cast<size_t>(r));
    size_t nl;
    while ((nl = pending.find('\n')) != std::string::npos) {
      std::string line = pending.substr(0, nl);
      pending.erase(0, nl + 1);
      std::string verb = line.substr(0, line.find(' '));
      std::string arg = line.size() > verb.size() ? line.substr(verb.size() + 1) : "";
      try {
        if (verb == "time") {
          emit(out_fd, {{"phase", "time"}, {"time_ns", unix_ns()}});
        } else if (verb == "go") {
          emit(out_fd, pair_phase(o, nlohmann::json::parse(arg)));
        } else if (verb == "measure") {
          emit(out_fd, measure_phase(nlohmann::json::parse(arg)));
        } else {
          emit(out_fd, {{"phase", "error"}, {"error", "unknown probe command '" + verb + "'"}});
        }
      } catch (const std::exception& e) {
        emit(out_fd, {{"phase", "error"}, {"error", std::string(verb) + ": " + e.what()}});
      }
    }
  }
  listener.stop();
  if (facts.token_written) ::unlink(token_path(o.shared_dir, o.run_id, o.index).c_str());
  return 0;
}

}  // namespace hpct::doctor
