#include "ps/client.h"

#include <poll.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <exception>
#include <optional>
#include <thread>

#include "core/error.h"
#include "net/socket.h"

namespace hpct::ps {

std::vector<PieceInfo> plan_pieces(const std::vector<TensorSpec>& tensors,
                                   std::uint64_t piece_bytes, int num_servers) {
  if (num_servers < 1) throw_invalid_argument("parameter servers: no server to place pieces on");
  std::vector<PieceInfo> out;
  std::vector<std::uint64_t> load(static_cast<size_t>(num_servers), 0);
  for (size_t t = 0; t < tensors.size(); ++t) {
    if (!is_summable(tensors[t].dtype)) {
      throw_invalid_argument("parameter servers: tensor " + tensors[t].name + " is " +
                             dtype_name(tensors[t].dtype) +
                             "; they sum float32, float64, int32 and int64");
    }
    const std::uint64_t esize = dtype_size(tensors[t].dtype);
    const std::uint64_t total = tensors[t].elements * esize;
    // Whole elements per piece, at least one.
    const std::uint64_t step = std::max<std::uint64_t>(esize, piece_bytes / esize * esize);
    std::uint32_t part = 0;
    for (std::uint64_t off = 0; off < total || (total == 0 && part == 0); off += step) {
      PieceInfo p;
      p.id = static_cast<std::uint32_t>(out.size());
      p.tensor = static_cast<int>(t);
      p.part = part++;
      p.offset_bytes = off;
      p.bytes = std::min(step, total - off);
      p.server = static_cast<int>(std::min_element(load.begin(), load.end()) - load.begin());
      load[static_cast<size_t>(p.server)] += std::max<std::uint64_t>(p.bytes, 1);
      out.push_back(p);
      if (total == 0) break;
    }
  }
  return out;
}

std::string Client::server_name(int s) const {
  const auto& a = options_.servers[static_cast<size_t>(s)];
  return "parameter server " + std::to_string(a.rank) +
         (a.host_name.empty() ? "" : " on " + a.host_name) + " (" + a.address + ":" +
         std::to_string(a.port) + ")";
}

Client::Client(ClientOptions options) : options_(std::move(options)) {
  if (options_.servers.empty()) throw_invalid_argument("parameter-server client: no servers given");
  if (options_.secret.empty()) throw_invalid_argument("parameter-server client: the job secret is empty");
  const Deadline deadline(options_.connect_timeout);
  for (size_t s = 0; s < options_.servers.size(); ++s) {
    const auto& a = options_.servers[s];
    const std::string what = server_name(static_cast<int>(s));
    std::unique_ptr<Link> link;
    std::string last_error;
    Millis backoff(10);
    while (!link) {
      try {
        UniqueFd fd = net::connect_tcp(a.address, a.port, deadline.end(), what);
        const net::Mac key = net::client_handshake(fd.get(), options_.secret, deadline.end(), what);
        link = std::make_unique<Link>(std::move(fd), what, key, /*mac_frames=*/false,
                                      net::Direction::kClientToServer, options_.max_payload);
      } catch (const Error& e) {
        if (e.code() == ErrorCode::kAuth || e.code() == ErrorCode::kMismatch) throw;
        last_error = e.what();
        if (deadline.expired()) {
          throw_timeout("could not reach " + what + " within " +
                        std::to_string(options_.connect_timeout.count()) + " ms: " + last_error);
        }
        std::this_thread::sleep_for(std::min(backoff, deadline.remaining()));
        backoff = std::min(backoff * 2, Millis(500));
      }
    }
    if (options_.staleness < 0) throw_invalid_argument("the staleness bound is negative");
    std::string hello_payload(5, '\0');
    hello_payload[0] = static_cast<char>(options_.mode);
    const auto st = static_cast<std::uint32_t>(options_.staleness);
    std::memcpy(hello_payload.data() + 1, &st, 4);
    hello_payload += options_.host_name;
    FrameHeader hello = make_header(Kind::kHello, static_cast<std::uint32_t>(options_.rank),
                                    hello_payload.size());
    hello.count = static_cast<std::uint32_t>(options_.num_workers);
    hello.step = kProtocolVersion;
    hello.flags = options_.mac_frames ? kFlagMac : 0;
    const auto until = SteadyClock::now() + options_.timeout;
    send_frame(*link, hello, hello_payload.data(), until);
    std::string payload;
    FrameHeader welcome = recv_frame(*link, &payload, until);
    if (welcome.kind == static_cast<std::uint8_t>(Kind::kError)) {
      throw Error(static_cast<ErrorCode>(std::min<std::uint32_t>(welcome.count, 6)), payload);
    }
    if (welcome.kind != static_cast<std::uint8_t>(Kind::kWelcome)) {
      throw_mismatch(what + " answered Hello with frame kind " + std::to_string(welcome.kind));
    }
    const auto mode = static_cast<Mode>(welcome.count);
    const int staleness = static_cast<int>(welcome.step);
    if (mode != options_.mode || staleness != options_.staleness) {
      throw_mismatch(what + " runs " + mode_name(mode) + " mode with staleness " +
                     std::to_string(staleness) + "; this worker asked for " +
                     mode_name(options_.mode) + " with " + std::to_string(options_.staleness));
    }
    mode_ = mode;
    staleness_ = staleness;
    if (options_.mac_frames) link->enable_mac();
    links_.push_back(std::move(link));
  }
}

Client::~Client() {
  if (failed_ || std::uncaught_exceptions() > 0) return;
  const auto until = SteadyClock::now() + Millis(2000);
  for (auto& link : links_) {
    if (!link) continue;
    try {
      send_frame(*link, make_header(Kind::kBye), nullptr, until);
    } catch (const Error&) {
      // The server is gone or stuck: nothing left to tell it.
    }
  }
}

template <typename LandFn>
void Client::run_until(std::vector<int> remaining, LandFn&& land, const std::string& what) {
  run_until(std::move(remaining), std::forward<LandFn>(land), what, [] {});
}

template <typename LandFn, typename FeedFn>
void Client::run_until(std::vector<int> remaining, LandFn&& land, const std::string& what,
                       FeedFn&& feed) {
  const size_t n = links_.size();
  std::vector<SteadyClock::time_point> last(n, SteadyClock::now());
  std::vector<pollfd> fds(n);
  std::vector<bool> dead(n, false);
  // One failure often causes others (a worker that fails closes its
  // connections; the servers then report it to everyone). The first error
  // seen is kept for a short grace while the other connections are read,
  // and the most telling one is raised: a server's own error (mismatch,
  // bad frame), then a server that closed, then a server's report that
  // some worker died.
  std::optional<Error> best;
  int best_rank = -1;
  SteadyClock::time_point give_up{};
  auto note = [&](int rank, const Error& e) {
    if (!best) give_up = SteadyClock::now() + Millis(100);
    if (rank > best_rank) {
      best = e;
      best_rank = rank;
    }
  };
  while (true) {
    feed();
    bool busy = false;
    for (size_t s = 0; s < n; ++s) {
      short ev = 0;
      if (!dead[s]) {
        ev = POLLIN;
        if (links_[s]->wants_write()) ev |= POLLOUT;
        busy = busy || remaining[s] > 0 || links_[s]->wants_write();
      }
      fds[s] = {dead[s] ? -1 : links_[s]->fd(), ev, 0};
    }
    if (best && (!busy || best_rank >= 3 || SteadyClock::now() >= give_up)) {
      failed_ = true;
      throw Error(best->code(), what + ": " + best->what());
    }
    if (!busy) return;
    int ready = ::poll(fds.data(), n, best ? 20 : 200);
    if (ready < 0 && errno != EINTR) throw_io("poll the parameter servers", errno);
    const auto now = SteadyClock::now();
    for (size_t s = 0; s < n; ++s) {
      if (dead[s]) continue;
      const int si = static_cast<int>(s);
      Link& link = *links_[s];
      try {
        bool moved = false;
        if (fds[s].revents & POLLOUT) moved = link.pump_send() || moved;
        if (fds[s].revents & (POLLIN | POLLHUP | POLLERR)) {
          moved = link.pump_recv(
                      [&](const FrameHeader& h) -> Landing {
                        if (h.kind == static_cast<std::uint8_t>(Kind::kError)) return Landing{};
                        if (remaining[s] <= 0) {
                          throw_data_corrupt(link.peer() + " sent frame kind " +
                                             std::to_string(h.kind) + " when none was expected");
                        }
                        return land(si, h);
                      },
                      [&](const FrameHeader& h, const char* p) {
                        if (h.kind == static_cast<std::uint8_t>(Kind::kError)) {
                          const auto code = static_cast<ErrorCode>(std::min<std::uint32_t>(
                              h.count, static_cast<std::uint32_t>(ErrorCode::kAuth)));
                          note(code == ErrorCode::kPeerFailure ? 1 : 3,
                               Error(code, std::string(p, h.bytes) + " (reported by " +
                                               link.peer() + ")"));
                          dead[s] = true;
                          return false;
                        }
                        if (h.kind == static_cast<std::uint8_t>(Kind::kReply)) {
                          last_count_ = static_cast<int>(h.count);
                        }
                        --remaining[s];
                        return true;
                      }) ||
                  moved;
        }
        if (moved) last[s] = now;
      } catch (const Error& e) {
        note(e.code() == ErrorCode::kPeerFailure || e.code() == ErrorCode::kIo ? 2 : 3, e);
        dead[s] = true;
        continue;
      }
      if (!best && (remaining[s] > 0 || link.wants_write()) && now - last[s] > options_.timeout) {
        failed_ = true;
        throw_timeout(what + ": " + link.peer() + " moved no byte for " +
                      std::to_string(options_.timeout.count() / 1000) + " s with " +
                      std::to_string(remaining[s]) +
                      " frames still owed (stopped, overloaded, or waiting for a stuck worker; "
                      "HPCT_TIMEOUT_S)");
      }
    }
  }
}

void Client::register_tensors(const std::vector<TensorSpec>& tensors,
                              const std::vector<void*>& values) {
  if (mode_ == Mode::kAsync && values.size() != tensors.size()) {
    throw_invalid_argument("parameter servers, async mode: register_tensors needs a buffer per "
                           "tensor for the initial parameters");
  }
  tensors_ = tensors;
  pieces_ = plan_pieces(tensors_, options_.piece_bytes, static_cast<int>(links_.size()));
  std::vector<int> remaining(links_.size(), 0);
  std::vector<std::string> payloads(pieces_.size());
  for (const auto& p : pieces_) {
    const auto& t = tensors_[static_cast<size_t>(p.tensor)];
    std::string& pl = payloads[p.id];
    const auto name_len = static_cast<std::uint32_t>(t.name.size());
    pl.append(reinterpret_cast<const char*>(&name_len), 4);
    pl += t.name;
    pl.append(reinterpret_cast<const char*>(&p.part), 4);
    FrameHeader h = make_header(Kind::kRegister, p.id);
    h.dtype = static_cast<std::uint8_t>(t.dtype);
    h.step = p.bytes / dtype_size(t.dtype);
    if (mode_ == Mode::kAsync && options_.rank == 0) {
      h.flags = kFlagInit;
      pl.append(static_cast<const char*>(values[static_cast<size_t>(p.tensor)]) + p.offset_bytes,
                p.bytes);
    }
    links_[static_cast<size_t>(p.server)]->queue_owned(h, std::move(pl));
    ++remaining[static_cast<size_t>(p.server)];
  }
  run_until(
      remaining,
      [&](int s, const FrameHeader& h) -> Landing {
        if (h.kind != static_cast<std::uint8_t>(Kind::kRegistered) || h.piece >= pieces_.size() ||
            pieces_[h.piece].server != s) {
          throw_data_corrupt(server_name(s) + " answered a registration with an unexpected frame");
        }
        const PieceInfo& p = pieces_[h.piece];
        if (h.bytes == 0) return Landing{};
        if (h.bytes != p.bytes || mode_ != Mode::kAsync) {
          throw_data_corrupt(server_name(s) + " sent initial values of the wrong size");
        }
        return Landing{static_cast<char*>(values[static_cast<size_t>(p.tensor)]) + p.offset_bytes};
      },
      "registering " + std::to_string(tensors.size()) + " tensors with the parameter servers");
}

int Client::exchange(const std::vector<const void*>& in, const std::vector<void*>& out) {
  if (in.size() != tensors_.size() || out.size() != tensors_.size()) {
    throw_invalid_argument("parameter servers: exchange got " + std::to_string(in.size()) +
                           " inputs and " + std::to_string(out.size()) + " outputs for " +
                           std::to_string(tensors_.size()) + " registered tensors");
  }
  ++steps_;
  std::vector<int> remaining(links_.size(), 0);
  for (const auto& p : pieces_) ++remaining[static_cast<size_t>(p.server)];
  // Pushes go out in piece order, at most window pieces pushed and not yet
  // answered: queued all at once, the pieces to every server share this
  // worker's link and all finish late together, so the sums come back after
  // the pushes instead of during them.
  const size_t window = options_.push_window > 0    ? static_cast<size_t>(options_.push_window)
                        : options_.push_window == 0 ? links_.size()
                                                    : pieces_.size();
  size_t next = 0, answered = 0;
  auto feed = [&] {
    while (next < pieces_.size() && next - answered < window) {
      const auto& p = pieces_[next++];
      const auto& t = tensors_[static_cast<size_t>(p.tensor)];
      FrameHeader h = make_header(Kind::kPush, p.id, p.bytes);
      h.dtype = static_cast<std::uint8_t>(t.dtype);
      h.step = steps_;
      links_[static_cast<size_t>(p.server)]->queue(
          h, static_cast<const char*>(in[static_cast<size_t>(p.tensor)]) + p.offset_bytes);
    }
  };
  // in and out may alias: a piece's reply lands only after its push is sent
  // (the server answers after reading all of it), and pieces do not overlap.
  last_count_ = 0;
  run_until(
      remaining,
      [&](int s, const FrameHeader& h) -> Landing {
        if (h.kind != static_cast<std::uint8_t>(Kind::kReply) || h.piece >= pieces_.size() ||
            pieces_[h.piece].server != s || h.bytes != pieces_[h.piece].bytes) {
          throw_data_corrupt(server_name(s) + " sent an unexpected frame (kind " +
                             std::to_string(h.kind) + ", piece " + std::to_string(h.piece) +
                             ") in step " + std::to_string(steps_));
        }
        const PieceInfo& p = pieces_[h.piece];
        ++answered;  // its payload lands in out, after its push left
        return Landing{static_cast<char*>(out[static_cast<size_t>(p.tensor)]) + p.offset_bytes};
      },
      "parameter-server step " + std::to_string(steps_), feed);
  return mode_ == Mode::kSync ? last_count_ : 1;
}

void Client::leave(const std::vector<void*>& params) {
  if (mode_ == Mode::kAsync && params.size() != tensors_.size()) {
    throw_invalid_argument("parameter servers, async mode: leave needs a buffer per tensor");
  }
  std::vector<int> remaining(links_.size(), 1);
  if (mode_ == Mode::kAsync) {
    for (const auto& p : pieces_) ++remaining[static_cast<size_t>(p.server)];
  }
  for (auto& link : links_) link->queue(make_header(Kind::kLeave), nullptr);
  run_until(
      remaining,
      [&](int s, const FrameHeader& h) -> Landing {
        if (h.kind == static_cast<std::uint8_t>(Kind::kLeft) && h.bytes == 0) return Landing{};
        if (h.kind != static_cast<std::uint8_t>(Kind::kFetched) || h.piece >= pieces_.size() ||
            pieces_[h.piece].server != s || h.bytes != pieces_[h.piece].bytes) {
          throw_data_corrupt(server_name(s) + " sent an unexpected frame at the epoch's end");
        }
        const PieceInfo& p = pieces_[h.piece];
        return Landing{static_cast<char*>(params[static_cast<size_t>(p.tensor)]) + p.offset_bytes};
      },
      "leaving the epoch (waiting for every worker to finish it)");
}

}  // namespace hpct::ps
