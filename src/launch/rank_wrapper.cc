#include "launch/rank_wrapper.h"
#include "launch/torchrun_env.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <fstream>
#include <sstream>
#include <thread>

#include "core/env.h"
#include "core/error.h"
#include "core/fd.h"
#include "core/world.h"
#include "launch/child_process.h"
#include "launch/flight_request.h"
#include "launch/memory_cgroup.h"
#include "launch/rank_protocol.h"
#include "net/socket.h"

namespace hpct::launch {
namespace {

// The first line on fd, waiting at most timeout in total.
std::string read_spec_line(int fd, Millis timeout) {
  Deadline deadline(timeout);
  std::string line;
  char buf[4096];
  while (true) {
    pollfd p{fd, POLLIN, 0};
    int r = ::poll(&p, 1, static_cast<int>(std::max<long long>(1, deadline.remaining().count())));
    if (r < 0 && errno == EINTR) continue;
    if (r == 0 || deadline.expired()) {
      throw_timeout("the rank wrapper got no job description from the launcher within " +
                    std::to_string(timeout.count()) + " ms");
    }
    // One byte at a time up to the newline would be slow; the launcher writes
    // nothing after the line, so reading past it loses nothing.
    ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    if (n <= 0) {
      throw_peer_failure("the launcher closed the rank wrapper's input before sending the job description");
    }
    line.append(buf, static_cast<size_t>(n));
    auto nl = line.find('\n');
    if (nl != std::string::npos) return line.substr(0, nl);
    if (line.size() > kMaxSpecBytes) throw_invalid_argument("the launcher's rank spec is too long");
  }
}

std::string own_hostname() {
  char buf[256] = {};
  if (::gethostname(buf, sizeof buf - 1) != 0) return "unknown";
  return buf;
}

// This rank's place: from the spec's table, or from srun's/mpirun's variables.
RankPlacement my_placement(const RankSpec& spec, const Env& env, int* rank_out) {
  int rank = spec.rank;
  WorldInfo world;
  if (rank < 0) {
    world = discover_world(env);
    if (world.launcher == Launcher::kNone || world.launcher == Launcher::kHpctrain) {
      throw_invalid_argument("the rank wrapper was started for a group spawner but sees no mpirun "
                             "or srun rank variables");
    }
    if (world.size != spec.size) {
      throw_mismatch(std::string(launcher_name(world.launcher)) + " started " +
                     std::to_string(world.size) + " ranks but the launcher asked for " +
                     std::to_string(spec.size));
    }
    rank = world.rank;
  }
  *rank_out = rank;
  if (!spec.placement.empty()) return spec.placement.at(static_cast<size_t>(rank));
  RankPlacement p;
  p.rank = rank;
  p.host = env.get("SLURMD_NODENAME").value_or(own_hostname());
  p.local_rank = world.local_rank;
  p.local_size = world.local_size;
  p.cross_rank = world.cross_rank;
  p.cross_size = world.cross_size;
  return p;
}

std::map<std::string, std::string> program_env(const RankSpec& spec, const RankPlacement& p,
                                               const Env& env, int secret_fd) {
  std::map<std::string, std::string> e = spec.env;
  const bool server = p.rank >= spec.size;
  if (spec.servers > 0) {
    // Workers learn the servers' addresses from the job store (ps/server/<s>).
    e["HPCT_PS_ROLE"] = server ? "server" : "worker";
    e["HPCT_PS_SERVERS"] = std::to_string(spec.servers);
    e["HPCT_PS_WORKERS"] = std::to_string(spec.size);
    if (server) {
      e["HPCT_PS_SERVER_RANK"] = std::to_string(p.rank - spec.size);
      // A server only sums and copies: one thread, never libtorch's pool.
      e["OMP_NUM_THREADS"] = "1";
    }
  }
  e["HPCT_RANK"] = std::to_string(server ? p.rank - spec.size : p.rank);
  e["HPCT_SIZE"] = std::to_string(server ? spec.servers : spec.size);
  e["HPCT_LOCAL_RANK"] = std::to_string(p.local_rank);
  e["HPCT_LOCAL_SIZE"] = std::to_string(p.local_size);
  e["HPCT_CROSS_RANK"] = std::to_string(p.cross_rank);
  e["HPCT_CROSS_SIZE"] = std::to_string(p.cross_size);
  e["HPCT_HOSTNAME"] = p.host;
  e["HPCT_RESTART"] = std::to_string(spec.restart);
  e["HPCT_JOB_ID"] = spec.job_id;
  if (!spec.store_addr.empty()) e["HPCT_STORE_ADDR"] = spec.store_addr;
  if (secret_fd >= 0) e["HPCT_SECRET_FD"] = std::to_string(secret_fd);
  add_torchrun_rank_env(e, p, spec.size);  // RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE
  // One rank per core: the host's cores shared by its ranks, unless the user
  // chose (in the launcher's environment, --env, or this host's).
  if (e.count("OMP_NUM_THREADS") == 0 && !env.get("OMP_NUM_THREADS")) {
    long cores = ::sysconf(_SC_NPROCESSORS_ONLN);
    long n = std::max(1L, cores / std::max(1, p.local_size));
    e["OMP_NUM_THREADS"] = std::to_string(n);
  }
  return e;
}

// The flight-record request of a stop, when the job has a directory for it
// (HPCT_JOB_DIR) and the record is on. It waits at most 2 s (or the grace
// period, when shorter): the record is a few hundred kB.
std::unique_ptr<FlightRequest> flight_request(const std::map<std::string, std::string>& env, int rank,
                                              const RankSpec& spec) {
  auto dir = env.find("HPCT_JOB_DIR");
  auto entries = env.find("HPCT_FLIGHT_RECORD_ENTRIES");
  if (dir == env.end() || dir->second.empty() || rank >= spec.size) return nullptr;
  if (entries != env.end() && std::atoll(entries->second.c_str()) <= 0) return nullptr;
  const Millis wait = std::min(Millis(2000), seconds_to_millis(spec.grace_s));
  return std::make_unique<FlightRequest>(dir->second, rank, own_hostname(), wait);
}

// How the program ended, from its wait status; a SIGKILL is laid at the
// kernel's OOM killer when the rank's cgroup counted a kill since the start
// (in a cgroup the rank shares, e.g. Slurm's, only when the wrapper did not
// send the SIGKILL itself).
RankEnd program_end(int status, const MemoryWatch& watch, bool sent_sigkill) {
  RankEnd end;
  if (WIFSIGNALED(status)) end.signal = WTERMSIG(status);
  else if (WIFEXITED(status)) end.exit_code = WEXITSTATUS(status);
  if (end.signal != SIGKILL || (sent_sigkill && !watch.made_for_rank)) return end;
  if (auto oom = oom_kill_since(watch)) {
    end.oom = true;
    end.oom_limit = oom->limit;
    end.oom_limit_from_launch = oom->made_for_rank;
    end.oom_cgroup = oom->cgroup;
  }
  return end;
}

class Wrapper {
 public:
  Wrapper(RankSpec spec, int rank) : spec_(std::move(spec)), rank_(rank) {}

  bool emit(RecordKind kind, const std::string& payload) {
    if (out_broken_) return false;
    if (!net::try_write_all(1, encode_record(rank_, kind, payload))) out_broken_ = true;
    return !out_broken_;
  }

  int run(const std::map<std::string, std::string>& env, int secret_fd, int signal_fd,
          bool watch_stdin, const RankMemoryCgroup* cgroup) {
    ChildOptions o;
    if (cgroup != nullptr) o.cgroup_procs = cgroup->procs_file();
    o.argv = rank_ >= spec_.size ? spec_.server_argv : spec_.argv;
    o.env = env;
    o.cwd = spec_.cwd;
    o.pipe_stdin = false;
    o.inherit_fd = secret_fd;
    o.death_signal = SIGKILL;
    Child child;
    try {
      child = start_child(o);
    } catch (const Error& e) {
      RankEnd end;
      end.error = e.what();
      emit(RecordKind::kExit, encode_rank_end(end));
      return end.launcher_exit_code();
    }
    if (secret_fd >= 0) ::close(secret_fd);
    const MemoryWatch memory = cgroup != nullptr ? cgroup->watch() : watch_memory_of(child.pid);
    emit(RecordKind::kStarted, std::to_string(child.pid) + " " + own_hostname());

    LineSplitter out_lines, err_lines;
    bool out_open = true, err_open = true;
    bool stopping = false;
    SteadyClock::time_point kill_at{};
    bool sent_sigkill = false;
    std::unique_ptr<FlightRequest> flight = flight_request(env, rank_, spec_);
    bool asking = false;  // for the flight record, before the SIGTERM of a stop
    int status = 0;
    bool ended = false;
    const Millis grace = seconds_to_millis(spec_.grace_s);
    auto on_out = [&](const std::string& l) { emit(RecordKind::kStdout, l); };
    auto on_err = [&](const std::string& l) { emit(RecordKind::kStderr, l); };

    auto drain = [&](int fd, LineSplitter& split, bool is_err, bool* open) {
      char buf[16384];
      for (int i = 0; i < 64; ++i) {  // bounded, so a chatty program cannot starve the checks
        ssize_t n = ::read(fd, buf, sizeof buf);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) return;  // EAGAIN
        if (n == 0) {
          *open = false;
          if (is_err) split.flush(on_err); else split.flush(on_out);
          return;
        }
        if (is_err) split.feed(buf, static_cast<size_t>(n), on_err);
        else split.feed(buf, static_cast<size_t>(n), on_out);
      }
    };

    while (!ended) {
      std::vector<pollfd> fds;
      if (out_open) fds.push_back({child.stdout_fd.get(), POLLIN, 0});
      if (err_open) fds.push_back({child.stderr_fd.get(), POLLIN, 0});
      const size_t ctl = fds.size();
      fds.push_back({signal_fd, POLLIN, 0});
      if (watch_stdin && !stopping) fds.push_back({0, POLLIN, 0});
      int r = ::poll(fds.data(), fds.size(), 50);
      if (r < 0 && errno != EINTR) break;
      if (out_open) drain(child.stdout_fd.get(), out_lines, false, &out_open);
      if (err_open) drain(child.stderr_fd.get(), err_lines, true, &err_open);
      bool stop_now = out_broken_;
      if (fds[ctl].revents & POLLIN) {
        signalfd_siginfo si;
        (void)!::read(signal_fd, &si, sizeof si);
        stop_now = true;
      }
      if (fds.size() > ctl + 1 && fds[ctl + 1].revents != 0) {
        char buf[256];
        ssize_t n = ::read(0, buf, sizeof buf);
        if (n == 0 || (n < 0 && errno != EINTR && errno != EAGAIN)) stop_now = true;
      }
      if (stop_now && !stopping) {
        stopping = true;
        asking = flight && flight->start(child.pid);
        if (!asking) {
          ::kill(-child.pid, SIGTERM);
          kill_at = SteadyClock::now() + grace;
        }
      }
      ended = reap(child.pid, &status);
      if (asking && (ended || flight->done())) {
        asking = false;
        flight->finish(ended);
        ::kill(-child.pid, SIGTERM);
        kill_at = SteadyClock::now() + grace;
      }
      if (stopping && !asking && SteadyClock::now() >= kill_at) sent_sigkill = ::kill(-child.pid, SIGKILL) == 0;
    }
    // The program is gone; take what it wrote last, without waiting on
    // descendants that may still hold the pipes, then end those too.
    if (out_open) drain(child.stdout_fd.get(), out_lines, false, &out_open);
    if (err_open) drain(child.stderr_fd.get(), err_lines, true, &err_open);
    out_lines.flush(on_out);
    err_lines.flush(on_err);
    ::kill(-child.pid, SIGKILL);
    return report_end(program_end(status, memory, sent_sigkill), stopping, env);
  }

  // The X record (and, for `hpctrain why`, a note: a rank that ended on its
  // own or by the OOM killer leaves no flight record); the wrapper's exit code.
  int report_end(const RankEnd& end, bool stopping, const std::map<std::string, std::string>& env) {
    auto dir = env.find("HPCT_JOB_DIR");
    if (!end.ok() && (!stopping || end.oom) && dir != env.end() && rank_ < spec_.size) {
      write_end_note(dir->second, rank_, own_hostname(), end.describe());
    }
    emit(RecordKind::kExit, encode_rank_end(end));
    return end.launcher_exit_code();
  }

 private:
  RankSpec spec_;
  int rank_;
  bool out_broken_ = false;
};

}  // namespace

int run_rank_wrapper(const RankWrapperOptions& options) {
  ::signal(SIGPIPE, SIG_IGN);
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGTERM);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGHUP);
  ::sigprocmask(SIG_BLOCK, &stop_signals, nullptr);
  UniqueFd signal_fd(::signalfd(-1, &stop_signals, SFD_CLOEXEC | SFD_NONBLOCK));
  if (!signal_fd.valid()) throw_io("signalfd", errno);

  std::string line;
  bool watch_stdin = true;
  if (!options.spec_file.empty()) {
    std::ifstream f(options.spec_file);
    if (!f) throw_io("cannot read rank spec file " + options.spec_file, errno);
    std::getline(f, line);
    struct stat st{};
    // A pipe (mpirun) or socket (ssh) on stdin can tell us the launcher left;
    // a terminal or /dev/null cannot.
    watch_stdin = ::fstat(0, &st) == 0 && (S_ISFIFO(st.st_mode) || S_ISSOCK(st.st_mode));
  } else {
    line = read_spec_line(0, options.spec_timeout);
  }
  RankSpec spec = decode_spec(line);
  ProcessEnv env;
  int rank = 0;
  RankPlacement place;
  try {
    place = my_placement(spec, env, &rank);
  } catch (const Error& e) {
    Wrapper w(spec, std::max(0, spec.rank));
    RankEnd end;
    end.error = e.what();
    w.emit(RecordKind::kExit, encode_rank_end(end));
    return end.launcher_exit_code();
  }

  int secret_fd = -1;
  if (!spec.secret.empty()) {
    int p[2];
    if (::pipe2(p, O_CLOEXEC) != 0) throw_io("pipe", errno);
    std::string s = spec.secret + "\n";
    if (spec.servers > 0) s += s;  // one line for the store, one for the parameter servers
    (void)!::write(p[1], s.data(), s.size());  // 65 bytes: fits any pipe buffer
    ::close(p[1]);
    secret_fd = p[0];
  }
  auto program_environment = program_env(spec, place, env, secret_fd);
  std::unique_ptr<RankMemoryCgroup> cgroup;
  if (spec.memory_per_rank > 0) {
    try {
      cgroup = std::make_unique<RankMemoryCgroup>(spec.job_id, rank, spec.memory_per_rank);
    } catch (const Error& e) {
      Wrapper w(spec, rank);
      RankEnd end;
      end.error = std::string(e.what()) + " (on host " + own_hostname() + ")";
      w.emit(RecordKind::kExit, encode_rank_end(end));
      return end.launcher_exit_code();
    }
  }
  Wrapper w(std::move(spec), rank);
  return w.run(program_environment, secret_fd, signal_fd.get(), watch_stdin, cgroup.get());
}

}  // namespace hpct::launch
