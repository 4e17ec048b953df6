#include "store/tcp_store.h"

#include <poll.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <condition_variable>
#include <cstring>
#include <map>
#include <optional>
#include <thread>

#include "core/error.h"
#include "core/fd.h"
#include "net/connection_server.h"
#include "net/frame.h"

namespace hpct::store {

// ---------------------------------------------------------------- wire codec

namespace tcp_wire {
namespace {

void put_u32(std::string* out, std::uint32_t v) {
  char b[4] = {static_cast<char>(v >> 24), static_cast<char>(v >> 16), static_cast<char>(v >> 8),
               static_cast<char>(v)};
  out->append(b, 4);
}

void put_str(std::string* out, const std::string& s) {
  put_u32(out, static_cast<std::uint32_t>(s.size()));
  out->append(s);
}

class Reader {
 public:
  Reader(std::string_view bytes, const std::string& from) : bytes_(bytes), from_(from) {}
  std::uint64_t uint(int n) {
    need(static_cast<size_t>(n));
    std::uint64_t v = 0;
    for (int i = 0; i < n; ++i) v = (v << 8) | static_cast<unsigned char>(bytes_[pos_++]);
    return v;
  }
  std::string str() {
    const size_t len = uint(4);
    need(len);  // checked against the bytes present before anything is allocated
    std::string s(bytes_.substr(pos_, len));
    pos_ += len;
    return s;
  }
  void finish() const {
    if (pos_ != bytes_.size()) bad("trailing bytes");
  }

 private:
  void need(size_t n) const {
    if (bytes_.size() - pos_ < n) bad("truncated");
  }
  [[noreturn]] void bad(const char* why) const {
    throw_data_corrupt("malformed store message from " + from_ + ": " + why + " at byte " +
                       std::to_string(pos_));
  }
  std::string_view bytes_;
  const std::string& from_;
  size_t pos_ = 0;
};

}  // namespace

std::string encode(const Message& m) {
  std::string out;
  out += static_cast<char>(m.kind);
  put_u32(&out, static_cast<std::uint32_t>(m.keys.size()));
  for (const auto& k : m.keys) put_str(&out, k);
  put_str(&out, m.value);
  const auto n = static_cast<std::uint64_t>(m.number);
  put_u32(&out, static_cast<std::uint32_t>(n >> 32));
  put_u32(&out, static_cast<std::uint32_t>(n));
  return out;
}

Message decode(std::string_view bytes, const std::string& from) {
  Reader r(bytes, from);
  Message m;
  m.kind = static_cast<std::uint8_t>(r.uint(1));
  // No reserve(count): the count is the peer's word, the bytes are not.
  for (std::uint64_t i = 0, count = r.uint(4); i < count; ++i) m.keys.push_back(r.str());
  m.value = r.str();
  m.number = static_cast<std::int64_t>(r.uint(8));
  r.finish();
  return m;
}

}  // namespace tcp_wire

using tcp_wire::Message;
using tcp_wire::Op;
using tcp_wire::Status;

namespace {

constexpr Millis kMaxWait(7LL * 24 * 3600 * 1000);  // waits beyond a week are clamped to one
constexpr Millis kWaitSlice(100);  // how often a blocked wait checks for stop and hang-up

Millis clamp_wait(Millis t) { return std::clamp(t, Millis(0), kMaxWait); }

}  // namespace

// ---------------------------------------------------------------- server

struct TcpStoreServer::State {
  explicit State(TcpStoreServerOptions o) : options(std::move(o)) {}

  void serve(UniqueFd fd, const std::string& peer, int wake_fd);
  // DataCorrupt unless request is a known op with the keys it needs.
  static void check_request(const Message& request, const std::string& peer);
  Message handle(const Message& request, int fd, const std::string& peer);
  // Blocks until every key exists, the timeout passes, the server stops
  // (Woken) or the client hangs up (PeerFailure). Returns the missing keys.
  std::vector<std::string> wait_for(const std::vector<std::string>& keys, Millis timeout, int fd,
                                    const std::string& peer);
  void note_allocation(size_t n) {
    size_t seen = largest_allocation.load();
    while (n > seen && !largest_allocation.compare_exchange_weak(seen, n)) {
    }
  }

  const TcpStoreServerOptions options;
  std::atomic<bool> stopping{false};

  std::mutex data_mu;
  std::condition_variable data_changed;
  std::map<std::string, std::string> data;  // guarded by data_mu

  std::atomic<std::uint64_t> authenticated{0}, auth_failures{0}, protocol_mismatches{0},
      timed_out{0}, oversize_frames{0}, bad_macs{0}, malformed_requests{0}, requests{0};
  std::atomic<size_t> largest_allocation{0};
  // Last: started when everything it serves with exists, stopped first.
  std::unique_ptr<net::ConnectionServer> server;
};

TcpStoreServer::TcpStoreServer(TcpStoreServerOptions options)
    : state_(std::make_unique<State>(std::move(options))) {
  State& s = *state_;
  const auto& o = s.options;
  const std::string where = o.bind_address + ":" + std::to_string(o.port);
  if (o.secret.empty())
    throw_invalid_argument("TCP store server on " + where + ": the job secret is empty");
  net::ConnectionServerOptions co;
  co.who = "TCP store server";
  co.peer_kind = "store client";
  co.log_subsystem = "store";
  co.bind_address = o.bind_address;
  co.port = o.port;
  co.max_connections = o.max_connections;
  co.logger = o.logger;
  s.server = std::make_unique<net::ConnectionServer>(
      std::move(co), [&s](UniqueFd fd, const std::string& peer, int wake_fd) {
        s.serve(std::move(fd), peer, wake_fd);
      });
}

TcpStoreServer::~TcpStoreServer() {
  State& s = *state_;
  {
    std::lock_guard<std::mutex> lock(s.data_mu);
    s.stopping = true;
  }
  s.data_changed.notify_all();
  s.server->stop();
}

int TcpStoreServer::port() const { return state_->server->port(); }
const std::string& TcpStoreServer::bind_address() const { return state_->options.bind_address; }

TcpStoreServerStats TcpStoreServer::stats() const {
  State& s = *state_;
  TcpStoreServerStats out;
  const net::ConnectionCounts counts = s.server->counts();
  out.accepted = counts.accepted;
  out.refused_at_capacity = counts.refused_at_capacity;
  out.active_connections = counts.active_connections;
  out.authenticated = s.authenticated;
  out.auth_failures = s.auth_failures;
  out.protocol_mismatches = s.protocol_mismatches;
  out.timed_out = s.timed_out;
  out.oversize_frames = s.oversize_frames;
  out.bad_macs = s.bad_macs;
  out.malformed_requests = s.malformed_requests;
  out.requests = s.requests;
  out.largest_frame_allocated = s.largest_allocation;
  return out;
}

void TcpStoreServer::State::serve(UniqueFd fd, const std::string& peer, int wake_fd) {
  std::optional<net::FrameChannel> channel;
  bool in_handshake = true;
  try {
    const auto key =
        net::server_handshake(fd.get(), options.secret,
                               SteadyClock::now() + options.handshake_timeout, wake_fd, peer);
    in_handshake = false;
    ++authenticated;
    channel.emplace(fd.get(), key, net::Direction::kServerToClient, options.max_frame_bytes,
                    wake_fd, peer);
    while (true) {
      std::string bytes = channel->recv(net::kNoDeadline, options.io_timeout);
      note_allocation(channel->largest_allocation());
      Message request;
      try {
        request = tcp_wire::decode(bytes, peer);
        check_request(request, peer);
      } catch (const Error& e) {
        ++malformed_requests;
        options.logger.warn("store", std::string("dropping ") + peer + ": " + e.what());
        break;
      }
      Message reply = handle(request, fd.get(), peer);
      channel->send(tcp_wire::encode(reply), SteadyClock::now() + options.io_timeout);
      ++requests;
    }
  } catch (const net::Woken&) {
    // The server is stopping.
  } catch (const Error& e) {
    switch (e.code()) {
      case ErrorCode::kAuth:
        ++(in_handshake ? auth_failures : bad_macs);
        options.logger.warn("store", std::string("dropping ") + peer + ": " + e.what());
        break;
      case ErrorCode::kMismatch:
        ++protocol_mismatches;
        options.logger.warn("store", std::string("dropping ") + peer + ": " + e.what());
        break;
      case ErrorCode::kDataCorrupt:
        ++oversize_frames;
        options.logger.warn("store", std::string("dropping ") + peer + ": " + e.what());
        break;
      case ErrorCode::kTimeout:
        ++timed_out;
        options.logger.warn(
            "store", std::string("dropping ") + peer + ": " + e.what() +
                         (in_handshake ? " (handshake not finished in time)" : " (frame stalled)"));
        break;
      case ErrorCode::kPeerFailure:
        options.logger.debug("store", e.what());  // clients leaving is normal
        break;
      default:
        options.logger.warn("store", std::string("dropping ") + peer + ": " + e.what());
    }
  } catch (const std::exception& e) {
    options.logger.error("store", std::string("dropping ") + peer + ": " + e.what());
  }
  if (channel) note_allocation(channel->largest_allocation());
  fd.reset();  // the client sees the close only after the counters are updated
}

std::vector<std::string> TcpStoreServer::State::wait_for(const std::vector<std::string>& keys,
                                                         Millis timeout, int fd,
                                                         const std::string& peer) {
  const auto deadline = SteadyClock::now() + clamp_wait(timeout);
  std::unique_lock<std::mutex> lock(data_mu);
  while (true) {
    std::vector<std::string> missing;
    for (const auto& k : keys) {
      if (data.find(k) == data.end()) missing.push_back(k);
    }
    if (missing.empty() || SteadyClock::now() >= deadline) return missing;
    if (stopping) throw net::Woken{};
    data_changed.wait_until(lock, std::min(deadline, SteadyClock::now() + kWaitSlice));
    if (stopping) throw net::Woken{};
    // A client waiting for its reply sends nothing: anything readable means
    // it closed (or broke the protocol), so stop holding a thread for it.
    lock.unlock();
    pollfd p{fd, POLLIN | POLLRDHUP, 0};
    const bool gone = ::poll(&p, 1, 0) > 0;
    lock.lock();
    if (gone) throw_peer_failure(peer + " hung up while waiting for store keys");
  }
}

void TcpStoreServer::State::check_request(const Message& request, const std::string& peer) {
  const auto op = static_cast<Op>(request.kind);
  if (request.kind < static_cast<std::uint8_t>(Op::kSet) ||
      request.kind > static_cast<std::uint8_t>(Op::kRemove)) {
    throw_data_corrupt("a request from " + peer + " has unknown kind " +
                       std::to_string(request.kind));
  }
  const bool one_key = op == Op::kSet || op == Op::kGet || op == Op::kAdd || op == Op::kRemove;
  if (one_key && request.keys.size() != 1) {
    throw_data_corrupt("a request from " + peer + " has " + std::to_string(request.keys.size()) +
                       " keys where one is needed");
  }
}

Message TcpStoreServer::State::handle(const Message& request, int fd, const std::string& peer) {
  Message reply;
  reply.kind = static_cast<std::uint8_t>(Status::kOk);
  const auto op = static_cast<Op>(request.kind);
  switch (op) {
    case Op::kSet: {
      {
        std::lock_guard<std::mutex> lock(data_mu);
        data[request.keys[0]] = request.value;
      }
      data_changed.notify_all();
      return reply;
    }
    case Op::kMissing:  // the keys still absent after the wait, as an ok reply
      reply.keys = wait_for(request.keys, Millis(request.number), fd, peer);
      return reply;
    case Op::kGet: {
      auto missing = wait_for(request.keys, Millis(request.number), fd, peer);
      if (missing.empty()) {
        std::lock_guard<std::mutex> lock(data_mu);
        auto it = data.find(request.keys[0]);
        if (it != data.end()) {
          reply.value = it->second;
          return reply;
        }
        missing = request.keys;  // removed between the wait and now: the wait it was
      }
      reply.kind = static_cast<std::uint8_t>(Status::kTimeout);
      reply.keys = std::move(missing);
      return reply;
    }
    case Op::kAdd: {
      {
        std::lock_guard<std::mutex> lock(data_mu);
        std::string& v = data[request.keys[0]];
        std::int64_t current = 0;
        if (!parse_counter(v, &current)) {
          reply.kind = static_cast<std::uint8_t>(Status::kError);
          reply.number = static_cast<std::int64_t>(ErrorCode::kInvalidArgument);
          reply.value = "add(" + printable_key(request.keys[0]) + "): the value at the store is not an integer";
          return reply;
        }
        reply.number = current + request.number;
        v = std::to_string(reply.number);
      }
      data_changed.notify_all();
      return reply;
    }
    case Op::kRemove: {
      std::lock_guard<std::mutex> lock(data_mu);
      reply.number = data.erase(request.keys[0]) > 0 ? 1 : 0;
      return reply;
    }
  }
  throw_data_corrupt("a request from " + peer + " has unknown kind " +
                     std::to_string(request.kind));
}

// ---------------------------------------------------------------- client

struct TcpStore::Connection {
  Connection(UniqueFd f, const net::Mac& key, size_t max_frame, const std::string& what)
      : fd(std::move(f)),
        channel(fd.get(), key, net::Direction::kClientToServer, max_frame, -1, what) {}
  UniqueFd fd;
  net::FrameChannel channel;
};

TcpStore::TcpStore(TcpStoreOptions options)
    : options_(std::move(options)), endpoint_(options_.host + ":" + std::to_string(options_.port)) {
  if (options_.secret.empty())
    throw_invalid_argument("TCP store client for " + endpoint_ + ": the job secret is empty");
  if (options_.port <= 0 || options_.port > 65535) {
    throw_invalid_argument("TCP store client: " + endpoint_ + " does not name a port");
  }
  idle_.push_back(connect_with_retry(options_.connect_timeout));
}

TcpStore::~TcpStore() = default;

std::unique_ptr<TcpStore::Connection> TcpStore::connect_once(SteadyClock::time_point until) {
  const std::string what = "the store at " + endpoint_;
  UniqueFd fd = net::connect_tcp(options_.host, options_.port, until, what);
  const net::Mac key = net::client_handshake(fd.get(), options_.secret, until, what);
  return std::make_unique<Connection>(std::move(fd), key, options_.max_frame_bytes, what);
}

std::unique_ptr<TcpStore::Connection> TcpStore::connect_with_retry(Millis budget) {
  Deadline deadline(budget);
  Millis step(10);
  std::string last_error;
  while (true) {
    try {
      return connect_once(deadline.end());
    } catch (const Error& e) {
      // A wrong secret or a stranger on the port will not fix itself.
      if (e.code() == ErrorCode::kAuth || e.code() == ErrorCode::kMismatch) throw;
      last_error = e.what();
    }
    if (deadline.expired()) {
      throw_timeout("could not connect to the store at " + endpoint_ + " within " +
                    std::to_string(budget.count()) + " ms: " + last_error);
    }
    std::this_thread::sleep_for(std::min(step, deadline.remaining()));
    step = std::min(step * 2, Millis(500));
  }
}

Message TcpStore::exchange(const Message& request, Millis wait_budget, const std::string& op,
                           SteadyClock::time_point until) {
  // Every step ends by `until` as well as by its own bound (a caller with a
  // deadline of its own; until is time_point::max() otherwise).
  const auto by = [until](Millis bound) { return std::min(SteadyClock::now() + bound, until); };
  std::unique_ptr<Connection> conn;
  {
    std::lock_guard<std::mutex> lock(pool_mu_);
    if (!idle_.empty()) {
      conn = std::move(idle_.back());
      idle_.pop_back();
    }
  }
  if (!conn) {
    try {
      conn = connect_with_retry(std::max(
          Millis(0),
          std::chrono::duration_cast<Millis>(by(options_.connect_timeout) - SteadyClock::now())));
    } catch (const Error& e) {
      throw Error(e.code(), op + ": " + e.what());
    }
  }
  Message reply;
  try {
    conn->channel.send(tcp_wire::encode(request), by(options_.io_timeout));
    const auto reply_until = by(clamp_wait(wait_budget) + options_.io_timeout);
    const Millis frame_timeout = std::max(
        Millis(1), std::min(options_.io_timeout,
                            std::chrono::duration_cast<Millis>(until - SteadyClock::now())));
    reply = tcp_wire::decode(conn->channel.recv(reply_until, frame_timeout),
                             "the store at " + endpoint_);
  } catch (const Error& e) {
    // The connection is dropped (conn goes out of scope): its sequence
    // numbers may be out of step with the server's.
    if (e.code() == ErrorCode::kTimeout && wait_budget.count() > 0 &&
        (request.kind == static_cast<std::uint8_t>(Op::kGet) ||
         request.kind == static_cast<std::uint8_t>(Op::kMissing))) {
      throw_timeout(describe_wait(request.keys, request.keys, wait_budget) +
                    ": no reply from the store at " + endpoint_);
    }
    throw Error(e.code(), op + ": " + e.what());
  }
  {
    std::lock_guard<std::mutex> lock(pool_mu_);
    idle_.push_back(std::move(conn));
  }
  return reply;
}

Message TcpStore::call(const Message& request, Millis wait_budget, const std::string& op,
                       SteadyClock::time_point until) {
  return checked(exchange(request, wait_budget, op, until), request, wait_budget, op);
}

Message TcpStore::checked(const Message& reply, const Message& request, Millis wait_budget,
                          const std::string& op) const {
  switch (static_cast<Status>(reply.kind)) {
    case Status::kOk:
      return reply;
    case Status::kTimeout:
      throw_timeout(describe_wait(request.keys, reply.keys, wait_budget) + where());
    case Status::kError:
      if (reply.number < 0 || reply.number > static_cast<std::int64_t>(ErrorCode::kAuth)) {
        throw_data_corrupt(op + ": the store at " + endpoint_ +
                           " replied with an unknown error code");
      }
      throw Error(static_cast<ErrorCode>(reply.number), reply.value + " (store " + endpoint_ + ")");
  }
  throw_data_corrupt(op + ": the store at " + endpoint_ + " replied with unknown kind " +
                     std::to_string(reply.kind));
}

namespace {
Message make(Op op, std::vector<std::string> keys, std::string value = {},
             std::int64_t number = 0) {
  Message m;
  m.kind = static_cast<std::uint8_t>(op);
  m.keys = std::move(keys);
  m.value = std::move(value);
  m.number = number;
  return m;
}
}  // namespace

void TcpStore::set(const std::string& key, const std::string& value) {
  call(make(Op::kSet, {key}, value), Millis(0), "set(" + key + ")");
}

void TcpStore::set_by(const std::string& key, const std::string& value, const Deadline& deadline) {
  call(make(Op::kSet, {key}, value), Millis(0),
       "set(" + key + ") within " + std::to_string(deadline.budget().count()) + " ms",
       deadline.end());
}

std::optional<std::string> TcpStore::peek_by(const std::string& key, const Deadline& deadline) {
  // A get that does not wait: the server answers Timeout at once when the
  // key is absent.
  const std::string op =
      "get(" + key + ") within " + std::to_string(deadline.budget().count()) + " ms";
  const Message get = make(Op::kGet, {key});
  const Message reply = exchange(get, Millis(0), op, deadline.end());
  if (reply.kind == static_cast<std::uint8_t>(Status::kTimeout)) return std::nullopt;
  return checked(reply, get, Millis(0), op).value;
}

std::string TcpStore::get(const std::string& key, Millis timeout) {
  timeout = clamp_wait(timeout);
  return call(make(Op::kGet, {key}, {}, timeout.count()), timeout, "get(" + key + ")").value;
}

std::int64_t TcpStore::add(const std::string& key, std::int64_t delta) {
  return call(make(Op::kAdd, {key}, {}, delta), Millis(0), "add(" + key + ")").number;
}

std::vector<std::string> TcpStore::missing(const std::vector<std::string>& keys, Millis timeout) {
  timeout = clamp_wait(timeout);
  return call(make(Op::kMissing, keys, {}, timeout.count()), timeout, "wait").keys;
}

std::string TcpStore::where() const { return " at the store " + endpoint_; }

bool TcpStore::remove(const std::string& key) {
  return call(make(Op::kRemove, {key}), Millis(0), "remove(" + key + ")").number != 0;
}

}  // namespace hpct::store
