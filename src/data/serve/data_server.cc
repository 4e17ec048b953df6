#include "data/serve/data_server.h"

#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <map>
#include <mutex>
#include <thread>

#include "core/error.h"
#include "data/bounded_queue.h"
#include "data/serve/data_wire.h"
#include "data/sampler.h"
#include "data/shard_index.h"
#include "store/socket.h"
#include "store/auth.h"

namespace hpct::data {

namespace auth = store::auth;

struct DataServer::State {
  explicit State(DataServerOptions o) : options(std::move(o)) {}
  void accept_loop();
  void serve(std::uint64_t id, UniqueFd fd, std::string peer);
  void stream(auth::FrameChannel& channel, const wire::Open& open, const std::string& peer);

  const DataServerOptions options;
  std::shared_ptr<const ShardIndex> index;
  UniqueFd listen_fd;
  UniqueFd wake_fd;  // eventfd written once at stop: stays readable
  int port = 0;
  std::atomic<bool> stopping{false};
  std::thread acceptor;

  std::mutex conn_mu;
  std::map<std::uint64_t, std::thread> connections;  // guarded by conn_mu
  std::vector<std::uint64_t> finished;               // guarded by conn_mu
  size_t active = 0;                                 // guarded by conn_mu

  std::atomic<std::uint64_t> accepted{0}, auth_failures{0}, streams_opened{0}, streams_finished{0},
      samples_sent{0};
  std::atomic<size_t> largest_queue{0};
};

DataServer::DataServer(DataServerOptions options) : state_(std::make_unique<State>(std::move(options))) {
  State& s = *state_;
  if (s.options.secret.empty()) throw_invalid_argument("data server: the job secret is empty");
  if (s.options.chunk_samples < 1) throw_invalid_argument("data server: chunk_samples is 0");
  s.index = ShardIndex::build(s.options.shards, s.options.fs, s.options.on_error, s.options.logger);
  s.listen_fd = store::listen_tcp(s.options.bind_address, s.options.port, &s.port, "data server");
  s.wake_fd.reset(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  if (!s.wake_fd.valid()) throw_io("data server: eventfd", errno);
  s.acceptor = std::thread([&s] { s.accept_loop(); });
}

DataServer::~DataServer() {
  State& s = *state_;
  s.stopping = true;
  std::uint64_t one = 1;
  [[maybe_unused]] ssize_t n = ::write(s.wake_fd.get(), &one, sizeof one);
  s.acceptor.join();
  std::map<std::uint64_t, std::thread> connections;
  {
    std::lock_guard<std::mutex> lock(s.conn_mu);
    connections.swap(s.connections);
  }
  for (auto& [id, t] : connections) t.join();
}

int DataServer::port() const { return state_->port; }
const ShardIndex& DataServer::index() const { return *state_->index; }

DataServerStats DataServer::stats() const {
  State& s = *state_;
  DataServerStats out;
  out.accepted = s.accepted;
  out.auth_failures = s.auth_failures;
  out.streams_opened = s.streams_opened;
  out.streams_finished = s.streams_finished;
  out.samples_sent = s.samples_sent;
  out.largest_queue = s.largest_queue;
  std::lock_guard<std::mutex> lock(s.conn_mu);
  out.active_connections = s.active;
  return out;
}

void DataServer::State::accept_loop() {
  std::uint64_t next_id = 0;
  while (true) {
    std::vector<std::thread> done;
    {
      std::lock_guard<std::mutex> lock(conn_mu);
      for (auto id : finished) {
        auto it = connections.find(id);
        if (it == connections.end()) continue;
        done.push_back(std::move(it->second));
        connections.erase(it);
      }
      finished.clear();
    }
    for (auto& t : done) t.join();
    pollfd fds[2] = {{listen_fd.get(), POLLIN, 0}, {wake_fd.get(), POLLIN, 0}};
    int ready = ::poll(fds, 2, 1000);
    if (ready < 0 && errno != EINTR) {
      options.logger.error("data", std::string("data server: poll: ") + std::strerror(errno));
      std::this_thread::sleep_for(Millis(10));
      continue;
    }
    if (fds[1].revents != 0) return;
    if (ready <= 0 || fds[0].revents == 0) continue;
    UniqueFd fd(::accept4(listen_fd.get(), nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC));
    if (!fd.valid()) {
      if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
        std::this_thread::sleep_for(Millis(10));  // out of descriptors: do not spin
      }
      continue;
    }
    const std::string peer = "data client " + store::peer_address(fd.get());
    std::lock_guard<std::mutex> lock(conn_mu);
    if (active >= options.max_connections) {
      options.logger.warn("data", "refused " + peer + ": max_connections reached");
      continue;
    }
    const std::uint64_t id = next_id++;
    try {
      std::thread t([this, id, f = fd.get(), peer] { serve(id, UniqueFd(f), peer); });
      fd.release();
      connections.emplace(id, std::move(t));
      ++active;
      ++accepted;
    } catch (const std::system_error& e) {
      options.logger.warn("data", "refused " + peer + ": cannot start a thread: " + e.what());
    }
  }
}

void DataServer::State::serve(std::uint64_t id, UniqueFd fd, std::string peer) {
  bool in_handshake = true;
  try {
    const auto key = auth::server_handshake(fd.get(), options.secret,
                                            SteadyClock::now() + options.handshake_timeout,
                                            wake_fd.get(), peer);
    in_handshake = false;
    auth::FrameChannel channel(fd.get(), key, auth::Direction::kServerToClient,
                               options.max_frame_bytes, wake_fd.get(), peer);
    // The request must follow the handshake promptly.
    std::string bytes = channel.recv(SteadyClock::now() + options.handshake_timeout, options.io_timeout);
    wire::Open open;
    try {
      open = wire::decode_open(bytes, peer);
      if (open.size < 1 || open.rank >= open.size) {
        throw_invalid_argument("rank " + std::to_string(open.rank) + " of " + std::to_string(open.size) +
                               " is not a rank");
      }
    } catch (const Error& e) {
      channel.send(wire::encode_error(static_cast<std::uint32_t>(e.code()), e.what()),
                   SteadyClock::now() + options.io_timeout);
      throw;
    }
    stream(channel, open, peer);
  } catch (const auth::Woken&) {
    // stopping
  } catch (const Error& e) {
    if (in_handshake && e.code() == ErrorCode::kAuth) ++auth_failures;
    if (e.code() == ErrorCode::kPeerFailure) {
      options.logger.debug("data", e.what());  // clients leaving is normal
    } else {
      options.logger.warn("data", std::string("dropping ") + peer + ": " + e.what());
    }
  } catch (const std::exception& e) {
    options.logger.error("data", std::string("dropping ") + peer + ": " + e.what());
  }
  fd.reset();
  std::lock_guard<std::mutex> lock(conn_mu);
  --active;
  finished.push_back(id);
}

void DataServer::State::stream(auth::FrameChannel& channel, const wire::Open& open,
                               const std::string& peer) {
  SplitOptions split;
  split.rank = static_cast<int>(open.rank);
  split.size = static_cast<int>(open.size);
  split.seed = open.seed;
  split.shuffle = open.shuffle;
  split.shuffle_buffer = open.shuffle_buffer;
  split.shuffle_initial = open.shuffle_initial;
  split.drop_last = open.drop_last;
  RankPlan plan = plan_epoch(index->shard_samples(), split, open.epoch);
  wire::Header header;
  header.total = plan.order.size();
  header.padded = plan.padded;
  header.dataset_samples = plan.dataset_samples;
  header.fingerprint = index->fingerprint();
  header.index_skipped = index->stats().skipped_samples;
  channel.send(wire::encode(header), SteadyClock::now() + options.io_timeout);
  ++streams_opened;
  options.logger.debug("data", peer + ": rank " + std::to_string(open.rank) + "/" +
                                   std::to_string(open.size) + " epoch " + std::to_string(open.epoch) +
                                   " from " + std::to_string(open.start) + " of " +
                                   std::to_string(header.total));

  // Producer: reads (and decodes) chunks into a bounded queue. Its errors
  // travel through the queue as an Error message for the client.
  // Items: an encoded message and the samples it carries.
  BoundedQueue<std::pair<std::string, size_t>> queue(options.queue_chunks);
  std::atomic<bool> quit{false};
  std::thread producer([&] {
    try {
      for (std::uint64_t pos = open.start; pos < plan.order.size() && !quit;) {
        wire::Chunk chunk;
        chunk.first = pos;
        const std::uint64_t end = std::min<std::uint64_t>(plan.order.size(), pos + options.chunk_samples);
        for (; pos < end; ++pos) {
          RawSample s = index->read(plan.order[pos]);
          if (options.decode) {
            try {
              DecodedSample d = decode_sample(s, options.fields);
              s.image = std::move(d.image);
              s.label = d.label;
            } catch (const Error& e) {
              s.error = e.what();
            }
            s.fields.clear();
            s.decoded = true;
          }
          chunk.samples.push_back(std::move(s));
        }
        std::pair<std::string, size_t> item(wire::encode(chunk), chunk.samples.size());
        // Waits in slices so that a stopping stream is noticed.
        while (!quit && !queue.push(item, Millis(200))) {
          if (queue.closed()) return;
        }
      }
      if (!quit) queue.push({wire::encode_end(plan.order.size()), 0}, options.send_timeout);
    } catch (const Error& e) {
      queue.push({wire::encode_error(static_cast<std::uint32_t>(e.code()), e.what()), 0},
                 options.send_timeout);
    }
    queue.close();
  });
  struct Joiner {
    std::thread& t;
    BoundedQueue<std::pair<std::string, size_t>>& q;
    std::atomic<bool>& quit;
    ~Joiner() {
      quit = true;
      q.close();
      t.join();
    }
  } joiner{producer, queue, quit};

  while (true) {
    if (stopping) throw auth::Woken{};
    auto item = queue.pop(Millis(200));
    if (!item) {
      if (queue.closed()) return;
      continue;
    }
    size_t hw = queue.high_water();
    size_t seen = largest_queue.load();
    while (hw > seen && !largest_queue.compare_exchange_weak(seen, hw)) {
    }
    const wire::Kind kind = wire::kind_of(item->first, "this server");
    channel.send(item->first, SteadyClock::now() + options.send_timeout);
    if (kind == wire::Kind::kChunk) {
      samples_sent += item->second;
    } else if (kind == wire::Kind::kEnd) {
      ++streams_finished;
      return;
    } else {
      return;  // an Error message: the stream is over
    }
  }
}

}  // namespace hpct::data
