#include "ps/server.h"

#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <map>
#include <vector>

#include "core/error.h"
#include "net/socket.h"

namespace hpct::ps {

namespace {

enum class WorkerState { kAbsent, kActive, kLeft, kBye, kDead };

constexpr int kPollSliceMs = 200;

struct Piece {
  std::string name;
  std::uint32_t part = 0;
  DataType dtype = DataType::kFloat32;
  std::uint64_t elements = 0;
  std::uint64_t bytes = 0;
  int first_registrar = -1;
  std::vector<bool> registered;
  int registrations = 0;
  bool ready = false;  // every worker registered
  std::string init;    // async: rank 0's values until ready
  bool have_init = false;
  std::vector<std::vector<char>> slots;  // per worker
  std::vector<bool> filled;
  std::vector<char> result;  // sync: the sum in flight
  std::uint64_t rounds = 0;
  // async
  std::vector<char> params;
  std::vector<char> snapshot;  // parameters at the last epoch turn
  std::vector<std::vector<char>> reply;  // per worker: a held Reply's copy
  std::vector<std::uint64_t> pushes;    // per worker, this epoch
  std::vector<std::int64_t> waiting;    // per worker: push count whose Reply is held, or -1
};

struct WorkerConn {
  WorkerState state = WorkerState::kAbsent;
  std::unique_ptr<Link> link;
  std::string host;
};

}  // namespace

struct Server::State {
  explicit State(ServerOptions o) : options(std::move(o)) {}

  void accept_one();
  void on_frame(int w, const FrameHeader& h, const char* payload);
  Landing land(int w, const FrameHeader& h);
  void on_register(int w, const FrameHeader& h, const char* payload);
  void on_push(int w, const FrameHeader& h);
  void on_leave(int w);
  void worker_gone(int w, WorkerState how, const std::string& why);
  void try_complete(std::uint32_t id);
  void try_release(std::uint32_t id);
  void recheck_all();
  void maybe_turn_epoch();
  std::vector<int> active_workers() const;
  bool all_done() const;
  // Tells every connected worker, then raises.
  [[noreturn]] void fail(ErrorCode code, const std::string& message);
  std::string worker_name(int w) const {
    const auto& h = workers[static_cast<size_t>(w)].host;
    return "worker " + std::to_string(w) + (h.empty() ? "" : " on " + h);
  }
  std::string piece_name(const Piece& p) const {
    return "tensor " + p.name + " part " + std::to_string(p.part);
  }
  std::string me() const {
    return "parameter server " + std::to_string(options.rank) +
           (options.host_name.empty() ? "" : " on " + options.host_name);
  }

  const ServerOptions options;
  UniqueFd listen_fd;
  UniqueFd wake_fd;
  int port = 0;
  std::atomic<bool> stopping{false};
  std::vector<WorkerConn> workers;
  std::map<std::uint32_t, Piece> pieces;
  ServerSummary summary;
  bool mode_known = false;  // set by the first Hello
  Mode mode = Mode::kSync;
  int staleness = 0;
  bool failed = false;  // fail() ran: its error propagates as is
};

Server::Server(ServerOptions options) : state_(std::make_unique<State>(std::move(options))) {
  State& s = *state_;
  const auto& o = s.options;
  if (o.secret.empty()) throw_invalid_argument(s.me() + ": the job secret is empty");
  if (o.num_workers < 1) throw_invalid_argument(s.me() + ": needs at least one worker");
  s.listen_fd = net::listen_tcp(o.bind_address, o.port, &s.port, s.me());
  s.wake_fd.reset(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  if (!s.wake_fd.valid()) throw_io(s.me() + ": eventfd", errno);
  s.workers.resize(static_cast<size_t>(o.num_workers));
}

Server::~Server() = default;

int Server::port() const { return state_->port; }

void Server::stop() {
  state_->stopping = true;
  std::uint64_t one = 1;
  [[maybe_unused]] ssize_t n = ::write(state_->wake_fd.get(), &one, sizeof one);
}

void Server::State::accept_one() {
  sockaddr_storage addr{};
  socklen_t len = sizeof addr;
  UniqueFd fd(::accept4(listen_fd.get(), reinterpret_cast<sockaddr*>(&addr), &len,
                        SOCK_NONBLOCK | SOCK_CLOEXEC));
  if (!fd.valid()) return;
  net::set_nodelay(fd.get());
  const std::string peer =
      "parameter-server client " + net::address_of(reinterpret_cast<sockaddr*>(&addr));
  const auto until = SteadyClock::now() + options.handshake_timeout;
  try {
    const net::Mac key = net::server_handshake(fd.get(), options.secret, until, -1, peer);
    auto link = std::make_unique<Link>(std::move(fd), peer, key, /*mac_frames=*/false,
                                       net::Direction::kServerToClient, options.max_payload);
    std::string hello_payload;
    FrameHeader hello = recv_frame(*link, &hello_payload, until);
    auto refuse = [&](const std::string& why) {
      const std::string msg = me() + " refused " + peer + ": " + why;
      FrameHeader e = make_header(Kind::kError, 0, msg.size());
      e.count = static_cast<std::uint32_t>(ErrorCode::kMismatch);
      try {
        send_frame(*link, e, msg.data(), until);
      } catch (const Error&) {
      }
      options.logger.warn("ps", msg);
    };
    if (hello.kind != static_cast<std::uint8_t>(Kind::kHello) || hello.step != kProtocolVersion) {
      return refuse("it does not speak parameter-server protocol version " +
                    std::to_string(kProtocolVersion));
    }
    const bool their_mac = (hello.flags & kFlagMac) != 0;
    if (their_mac != options.mac_frames) {
      return refuse(std::string("it ") + (their_mac ? "wants" : "does not want") +
                    " a MAC on every frame and this server " +
                    (options.mac_frames ? "does" : "does not") +
                    " (set HPCT_PS_FRAME_MAC alike for the whole job)");
    }
    if (static_cast<int>(hello.count) != options.num_workers) {
      return refuse("it counts " + std::to_string(hello.count) + " workers, this server " +
                    std::to_string(options.num_workers));
    }
    if (hello_payload.size() < 5) return refuse("its Hello is too short");
    const auto their_mode = static_cast<Mode>(hello_payload[0]);
    std::uint32_t their_staleness = 0;
    std::memcpy(&their_staleness, hello_payload.data() + 1, 4);
    const std::string host = hello_payload.substr(5);
    if (their_mode != Mode::kSync && their_mode != Mode::kAsync) {
      return refuse("it asks for an unknown mode");
    }
    if (mode_known && (their_mode != mode || static_cast<int>(their_staleness) != staleness)) {
      return refuse(std::string("it asks for ") + mode_name(their_mode) + " mode with staleness " +
                    std::to_string(their_staleness) + " where the workers before it asked for " +
                    mode_name(mode) + " with " + std::to_string(staleness) +
                    " (every worker must use the same --sync and --staleness)");
    }
    const int w = static_cast<int>(hello.piece);
    if (w < 0 || w >= options.num_workers) {
      return refuse("worker rank " + std::to_string(w) + " is out of range");
    }
    if (workers[static_cast<size_t>(w)].state != WorkerState::kAbsent) {
      return refuse("worker rank " + std::to_string(w) + " connected already");
    }
    mode_known = true;
    mode = their_mode;
    staleness = static_cast<int>(their_staleness);
    WorkerConn& c = workers[static_cast<size_t>(w)];
    c.host = host;
    c.state = WorkerState::kActive;
    FrameHeader welcome = make_header(Kind::kWelcome, static_cast<std::uint32_t>(options.rank));
    welcome.count = static_cast<std::uint32_t>(mode);
    welcome.step = static_cast<std::uint64_t>(staleness);
    link->queue_owned(welcome, options.host_name);
    if (options.mac_frames) link->enable_mac();
    c.link = std::move(link);
    options.logger.debug("ps", me() + ": " + worker_name(w) + " connected from " + peer);
  } catch (const Error& e) {
    options.logger.warn("ps", me() + ": dropping " + peer + ": " + e.what());
  } catch (const net::Woken&) {
  }
}

Landing Server::State::land(int w, const FrameHeader& h) {
  check_dtype(h, worker_name(w));
  const auto kind = static_cast<Kind>(h.kind);
  if (kind == Kind::kPush) {
    auto it = pieces.find(h.piece);
    if (it == pieces.end() || !it->second.ready) {
      fail(ErrorCode::kDataCorrupt, worker_name(w) + " pushed piece " + std::to_string(h.piece) +
                                        " before every worker registered it at " + me());
    }
    Piece& p = it->second;
    if (h.dtype != static_cast<std::uint8_t>(p.dtype) || h.bytes != p.bytes) {
      fail(ErrorCode::kMismatch,
           worker_name(w) + " pushed " + std::to_string(h.bytes) + " bytes of " +
               dtype_name(static_cast<DataType>(h.dtype)) + " for " + piece_name(p) + ", which has " +
               std::to_string(p.bytes) + " bytes of " + dtype_name(p.dtype) + " at " + me());
    }
    if (p.filled[static_cast<size_t>(w)]) {
      fail(ErrorCode::kDataCorrupt, worker_name(w) + " pushed " + piece_name(p) +
                                        " twice in one round at " + me());
    }
    return Landing{p.slots[static_cast<size_t>(w)].data()};
  }
  if (kind == Kind::kRegister || kind == Kind::kLeave || kind == Kind::kBye ||
      kind == Kind::kFetch) {
    if (kind != Kind::kRegister && h.bytes != 0) {
      fail(ErrorCode::kDataCorrupt, worker_name(w) + " sent a control frame with a payload");
    }
    return Landing{};
  }
  fail(ErrorCode::kDataCorrupt,
       worker_name(w) + " sent a frame of unknown kind " + std::to_string(h.kind) + " to " + me());
}

void Server::State::on_frame(int w, const FrameHeader& h, const char* payload) {
  switch (static_cast<Kind>(h.kind)) {
    case Kind::kRegister:
      return on_register(w, h, payload);
    case Kind::kPush:
      summary.bytes_in += h.bytes;
      ++summary.pushes;
      return on_push(w, h);
    case Kind::kLeave:
      return on_leave(w);
    case Kind::kFetch: {
      auto it = pieces.find(h.piece);
      if (it == pieces.end() || !it->second.ready) {
        fail(ErrorCode::kDataCorrupt,
             worker_name(w) + " fetched unknown piece " + std::to_string(h.piece));
      }
      Piece& p = it->second;
      auto& buf = p.reply[static_cast<size_t>(w)];
      buf.assign(p.params.begin(), p.params.end());
      FrameHeader f = make_header(Kind::kFetched, h.piece, p.bytes);
      f.dtype = static_cast<std::uint8_t>(p.dtype);
      workers[static_cast<size_t>(w)].link->queue(f, buf.data());
      return;
    }
    case Kind::kBye:
      return worker_gone(w, WorkerState::kBye, "said bye");
    default:
      break;
  }
}

void Server::State::on_register(int w, const FrameHeader& h, const char* payload) {
  // payload: name length u32 | name | part u32 | values (kFlagInit)
  auto bad = [&](const char* why) {
    fail(ErrorCode::kDataCorrupt, worker_name(w) + " sent a malformed Register: " + why);
  };
  if (h.bytes < 8) bad("too short");
  std::uint32_t name_len, part;
  std::memcpy(&name_len, payload, 4);
  if (h.bytes < 8ull + name_len) bad("name overruns the frame");
  std::string name(payload + 4, name_len);
  std::memcpy(&part, payload + 4 + name_len, 4);
  const char* values = payload + 8 + name_len;
  const std::uint64_t values_bytes = h.bytes - 8 - name_len;
  const auto dtype = static_cast<DataType>(h.dtype);
  const std::uint64_t elements = h.step;
  const bool init = (h.flags & kFlagInit) != 0;
  if (init && values_bytes != elements * dtype_size(dtype)) bad("initial values of the wrong size");
  if (!init && values_bytes != 0) bad("values without the init flag");

  auto [it, fresh] = pieces.try_emplace(h.piece);
  Piece& p = it->second;
  if (fresh) {
    p.name = name;
    p.part = part;
    p.dtype = dtype;
    p.elements = elements;
    p.bytes = elements * dtype_size(dtype);
    p.first_registrar = w;
    p.registered.assign(workers.size(), false);
  } else if (p.name != name || p.part != part || p.dtype != dtype || p.elements != elements) {
    fail(ErrorCode::kMismatch,
         "shape mismatch for piece " + std::to_string(h.piece) + ": " + worker_name(w) +
             " registered tensor " + name + " part " + std::to_string(part) + " as " +
             std::to_string(elements) + " " + dtype_name(dtype) + " elements, " +
             worker_name(p.first_registrar) + " as tensor " + p.name + " part " +
             std::to_string(p.part) + " with " + std::to_string(p.elements) + " " +
             dtype_name(p.dtype) + " elements (every worker must build the same model)");
  }
  if (p.registered[static_cast<size_t>(w)]) bad("the piece is registered twice");
  p.registered[static_cast<size_t>(w)] = true;
  ++p.registrations;
  if (init && w == 0) {
    p.init.assign(values, values_bytes);
    p.have_init = true;
  }
  if (p.registrations < options.num_workers) return;

  const size_t W = workers.size();
  p.slots.assign(W, std::vector<char>(p.bytes));
  p.filled.assign(W, false);
  p.pushes.assign(W, 0);
  p.waiting.assign(W, -1);
  p.reply.assign(W, {});
  if (mode == Mode::kSync) {
    p.result.assign(p.bytes, 0);
  } else {
    if (!p.have_init) {
      fail(ErrorCode::kInvalidArgument, "async mode: worker 0 registered " + piece_name(p) +
                                            " without initial values at " + me());
    }
    p.params.assign(p.init.begin(), p.init.end());
    std::string().swap(p.init);
  }
  p.ready = true;
  if (mode == Mode::kAsync) p.snapshot = p.params;
  for (size_t v = 0; v < W; ++v) {
    WorkerConn& c = workers[v];
    if (!c.link) continue;
    FrameHeader r = make_header(Kind::kRegistered, h.piece, 0);
    r.dtype = static_cast<std::uint8_t>(p.dtype);
    if (mode == Mode::kAsync) {
      r.bytes = p.bytes;
      // The snapshot stays unchanged until the epoch turns, which needs
      // every worker to have read this and left.
      c.link->queue(r, p.snapshot.data());
    } else {
      c.link->queue(r, nullptr);
    }
  }
}

void Server::State::on_push(int w, const FrameHeader& h) {
  Piece& p = pieces.at(h.piece);
  if (mode == Mode::kSync) {
    p.filled[static_cast<size_t>(w)] = true;
    try_complete(h.piece);
    return;
  }
  add_scaled(p.dtype, p.params.data(), p.slots[static_cast<size_t>(w)].data(),
             1.0 / options.num_workers, p.elements);
  p.pushes[static_cast<size_t>(w)] += 1;
  p.waiting[static_cast<size_t>(w)] = static_cast<std::int64_t>(p.pushes[static_cast<size_t>(w)]);
  try_release(h.piece);
}

std::vector<int> Server::State::active_workers() const {
  std::vector<int> out;
  for (size_t w = 0; w < workers.size(); ++w) {
    if (workers[w].state == WorkerState::kActive) out.push_back(static_cast<int>(w));
  }
  return out;
}

void Server::State::try_complete(std::uint32_t id) {
  Piece& p = pieces.at(id);
  const std::vector<int> active = active_workers();
  if (active.empty()) return;
  for (int w : active) {
    if (!p.filled[static_cast<size_t>(w)]) return;
  }
  std::vector<const void*> srcs;
  for (int w : active) srcs.push_back(p.slots[static_cast<size_t>(w)].data());
  sum_in_order(p.dtype, p.result.data(), srcs, p.elements);
  ++p.rounds;
  for (int w : active) {
    p.filled[static_cast<size_t>(w)] = false;
    FrameHeader r = make_header(Kind::kReply, id, p.bytes);
    r.dtype = static_cast<std::uint8_t>(p.dtype);
    r.count = static_cast<std::uint32_t>(active.size());
    r.step = p.rounds;
    // Safe without a copy: the next round of this piece completes only after
    // every worker pushed again, which each does only after reading this.
    workers[static_cast<size_t>(w)].link->queue(r, p.result.data());
  }
}

void Server::State::try_release(std::uint32_t id) {
  Piece& p = pieces.at(id);
  const std::vector<int> active = active_workers();
  if (active.empty()) return;
  std::uint64_t slowest = UINT64_MAX;
  for (int w : active) slowest = std::min(slowest, p.pushes[static_cast<size_t>(w)]);
  for (int w : active) {
    const std::int64_t t = p.waiting[static_cast<size_t>(w)];
    if (t < 0 || static_cast<std::int64_t>(slowest) < t - staleness) continue;
    p.waiting[static_cast<size_t>(w)] = -1;
    auto& buf = p.reply[static_cast<size_t>(w)];
    buf.assign(p.params.begin(), p.params.end());
    FrameHeader r = make_header(Kind::kReply, id, p.bytes);
    r.dtype = static_cast<std::uint8_t>(p.dtype);
    r.step = static_cast<std::uint64_t>(t);
    workers[static_cast<size_t>(w)].link->queue(r, buf.data());
  }
}

void Server::State::recheck_all() {
  for (auto& [id, p] : pieces) {
    if (!p.ready) continue;
    if (mode == Mode::kSync) {
      try_complete(id);
    } else {
      try_release(id);
    }
  }
}

void Server::State::on_leave(int w) {
  workers[static_cast<size_t>(w)].state = WorkerState::kLeft;
  recheck_all();
  maybe_turn_epoch();
}

void Server::State::maybe_turn_epoch() {
  bool any_left = false;
  for (const auto& c : workers) {
    if (c.state == WorkerState::kActive || c.state == WorkerState::kAbsent) return;
    if (c.state == WorkerState::kLeft) any_left = true;
  }
  if (!any_left) return;
  ++summary.epochs;
  for (auto& [id, p] : pieces) {
    if (!p.ready) continue;
    std::fill(p.pushes.begin(), p.pushes.end(), 0);
    std::fill(p.waiting.begin(), p.waiting.end(), -1);
    if (mode == Mode::kAsync) p.snapshot.assign(p.params.begin(), p.params.end());
  }
  for (auto& c : workers) {
    if (c.state != WorkerState::kLeft) continue;
    c.state = WorkerState::kActive;
    c.link->queue(make_header(Kind::kLeft), nullptr);
    if (mode != Mode::kAsync) continue;
    for (auto& [id, p] : pieces) {
      if (!p.ready) continue;
      FrameHeader f = make_header(Kind::kFetched, id, p.bytes);
      f.dtype = static_cast<std::uint8_t>(p.dtype);
      c.link->queue(f, p.snapshot.data());  // unchanged until every worker has it
    }
  }
}

void Server::State::worker_gone(int w, WorkerState how, const std::string& why) {
  WorkerConn& c = workers[static_cast<size_t>(w)];
  const WorkerState before = c.state;
  c.state = how;
  if (how == WorkerState::kDead) {
    ++summary.workers_died;
    c.link.reset();
    const bool mid_job = before == WorkerState::kActive || before == WorkerState::kLeft;
    if (mode == Mode::kSync && mid_job) {
      fail(ErrorCode::kPeerFailure, worker_name(w) + " " + why + " (without saying bye) at " +
                                        me() + ": a sync step cannot finish without it");
    }
    options.logger.warn("ps", me() + ": " + worker_name(w) + " " + why +
                                  " without saying bye; the others go on without it (async mode)");
  } else {
    ++summary.workers_bye;
  }
  recheck_all();
  maybe_turn_epoch();
}

bool Server::State::all_done() const {
  for (const auto& c : workers) {
    if (c.state != WorkerState::kBye && c.state != WorkerState::kDead) return false;
  }
  return true;
}

void Server::State::fail(ErrorCode code, const std::string& message) {
  failed = true;
  FrameHeader e = make_header(Kind::kError, 0, message.size());
  e.count = static_cast<std::uint32_t>(code);
  const auto until = SteadyClock::now() + Millis(2000);
  for (auto& c : workers) {
    if (!c.link) continue;
    try {
      send_frame(*c.link, e, message.data(), until);  // after what it had queued
    } catch (const Error&) {
      // That worker is gone too; tell the rest.
    }
  }
  throw Error(code, message);
}

ServerSummary Server::run() {
  State& s = *state_;
  auto last_progress = SteadyClock::now();
  std::vector<pollfd> fds;
  std::vector<int> owner;  // worker per fds entry; -1 listen, -2 wake
  while (!s.all_done()) {
    if (s.stopping) {
      for (auto& c : s.workers) c.link.reset();
      throw_peer_failure(s.me() + " was stopped");
    }
    fds.clear();
    owner.clear();
    fds.push_back({s.wake_fd.get(), POLLIN, 0});
    owner.push_back(-2);
    bool anyone_absent = false;
    for (size_t w = 0; w < s.workers.size(); ++w) {
      const WorkerConn& c = s.workers[w];
      if (c.state == WorkerState::kAbsent) anyone_absent = true;
      if (!c.link) continue;
      short ev = 0;
      // A worker that left is not read until the epoch turns (its next
      // epoch must not mix with the others' last steps); its hang-up still
      // shows as POLLHUP.
      if (c.state == WorkerState::kActive) ev |= POLLIN;
      if (c.link->wants_write()) ev |= POLLOUT;
      fds.push_back({c.link->fd(), ev, 0});
      owner.push_back(static_cast<int>(w));
    }
    if (anyone_absent) {
      fds.push_back({s.listen_fd.get(), POLLIN, 0});
      owner.push_back(-1);
    }
    int ready = ::poll(fds.data(), fds.size(), kPollSliceMs);
    if (ready < 0) {
      if (errno == EINTR) continue;
      throw_io(s.me() + ": poll", errno);
    }
    if (ready == 0) {
      const auto idle = std::chrono::duration_cast<Millis>(SteadyClock::now() - last_progress);
      if (idle > s.options.idle_timeout) {
        std::string who;
        for (size_t w = 0; w < s.workers.size(); ++w) {
          const auto st = s.workers[w].state;
          if (st == WorkerState::kAbsent || st == WorkerState::kActive) {
            who += (who.empty() ? "" : ", ") + s.worker_name(static_cast<int>(w)) +
                   (st == WorkerState::kAbsent ? " (never connected)" : "");
          }
        }
        s.fail(ErrorCode::kTimeout,
               s.me() + " heard nothing for " + std::to_string(idle.count() / 1000) +
                   " s while waiting for " + (who.empty() ? "the workers" : who) +
                   " (HPCT_TIMEOUT_S)");
      }
      continue;
    }
    last_progress = SteadyClock::now();
    for (size_t i = 0; i < fds.size(); ++i) {
      if (fds[i].revents == 0) continue;
      const int w = owner[i];
      if (w == -2) continue;  // stopping: handled at the loop's top
      if (w == -1) {
        s.accept_one();
        continue;
      }
      WorkerConn& c = s.workers[static_cast<size_t>(w)];
      if (!c.link) continue;
      try {
        if (fds[i].revents & POLLOUT) c.link->pump_send();
        if (c.state == WorkerState::kActive && (fds[i].revents & (POLLIN | POLLHUP | POLLERR))) {
          c.link->pump_recv([&](const FrameHeader& h) { return s.land(w, h); },
                            [&](const FrameHeader& h, const char* p) {
                              s.on_frame(w, h, p);
                              return c.state == WorkerState::kActive;
                            });
        } else if (fds[i].revents & (POLLHUP | POLLERR)) {
          throw_peer_failure(c.link->peer() + " hung up");
        }
      } catch (const Error& e) {
        if (s.failed) throw;
        if (e.code() != ErrorCode::kPeerFailure && e.code() != ErrorCode::kIo) {
          // A protocol violation or a failed MAC from one worker fails the job.
          s.fail(e.code(), s.worker_name(w) + ": " + e.what());
        }
        if (c.state == WorkerState::kBye) {
          c.link.reset();
        } else {
          s.worker_gone(w, WorkerState::kDead, "closed its connection");
        }
      }
      if (c.state == WorkerState::kBye && c.link && !c.link->wants_write()) c.link.reset();
    }
  }
  return s.summary;
}

}  // namespace hpct::ps
