#include "data/serve/data_server.h"

#include <atomic>
#include <thread>

#include "core/error.h"
#include "data/bounded_queue.h"
#include "data/serve/data_wire.h"
#include "data/sampler.h"
#include "data/shard_index.h"
#include "net/connection_server.h"
#include "net/frame.h"

namespace hpct::data {

struct DataServer::State {
  explicit State(DataServerOptions o) : options(std::move(o)) {}
  void serve(UniqueFd fd, const std::string& peer, int wake_fd);
  void stream(net::FrameChannel& channel, const wire::Open& open, const std::string& peer);

  const DataServerOptions options;
  std::shared_ptr<const ShardIndex> index;
  std::atomic<bool> stopping{false};

  std::atomic<std::uint64_t> auth_failures{0}, streams_opened{0}, streams_finished{0},
      samples_sent{0};
  std::atomic<size_t> largest_queue{0};
  // Last: started when everything it serves with exists, stopped first.
  std::unique_ptr<net::ConnectionServer> server;
};

DataServer::DataServer(DataServerOptions options) : state_(std::make_unique<State>(std::move(options))) {
  State& s = *state_;
  if (s.options.secret.empty()) throw_invalid_argument("data server: the job secret is empty");
  if (s.options.chunk_samples < 1) throw_invalid_argument("data server: chunk_samples is 0");
  s.index = ShardIndex::build(s.options.shards, s.options.fs, s.options.on_error, s.options.logger);
  net::ConnectionServerOptions co;
  co.who = "data server";
  co.peer_kind = "data client";
  co.log_subsystem = "data";
  co.bind_address = s.options.bind_address;
  co.port = s.options.port;
  co.max_connections = s.options.max_connections;
  co.logger = s.options.logger;
  s.server = std::make_unique<net::ConnectionServer>(
      std::move(co), [&s](UniqueFd fd, const std::string& peer, int wake_fd) {
        s.serve(std::move(fd), peer, wake_fd);
      });
}

DataServer::~DataServer() {
  state_->stopping = true;
  state_->server->stop();
}

int DataServer::port() const { return state_->server->port(); }
const ShardIndex& DataServer::index() const { return *state_->index; }

DataServerStats DataServer::stats() const {
  State& s = *state_;
  DataServerStats out;
  const net::ConnectionCounts counts = s.server->counts();
  out.accepted = counts.accepted;
  out.active_connections = counts.active_connections;
  out.auth_failures = s.auth_failures;
  out.streams_opened = s.streams_opened;
  out.streams_finished = s.streams_finished;
  out.samples_sent = s.samples_sent;
  out.largest_queue = s.largest_queue;
  return out;
}

void DataServer::State::serve(UniqueFd fd, const std::string& peer, int wake_fd) {
  bool in_handshake = true;
  try {
    const auto key = net::server_handshake(fd.get(), options.secret,
                                            SteadyClock::now() + options.handshake_timeout,
                                            wake_fd, peer);
    in_handshake = false;
    net::FrameChannel channel(fd.get(), key, net::Direction::kServerToClient,
                               options.max_frame_bytes, wake_fd, peer);
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
  } catch (const net::Woken&) {
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
}

void DataServer::State::stream(net::FrameChannel& channel, const wire::Open& open,
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
    if (stopping) throw net::Woken{};
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
