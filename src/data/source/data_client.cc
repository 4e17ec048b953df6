#include "data/source/data_client.h"

#include <thread>

#include "core/error.h"
#include "core/fd.h"
#include "net/frame.h"

namespace hpct::data {

struct DataClient::Connection {
  Connection(UniqueFd f, const net::Mac& key, size_t max_frame, const std::string& what)
      : fd(std::move(f)), channel(fd.get(), key, net::Direction::kClientToServer, max_frame, -1, what) {}
  UniqueFd fd;
  net::FrameChannel channel;
};

DataClient::DataClient(DataClientOptions options, std::uint64_t start)
    : options_(std::move(options)),
      endpoint_("the data server at " + options_.host + ":" + std::to_string(options_.port)),
      position_(start) {
  if (options_.secret.empty()) throw_invalid_argument("data client: the job secret is empty");
  reopen_with_retry("");
}

DataClient::~DataClient() = default;

void DataClient::open_stream() {
  conn_.reset();
  const auto until = SteadyClock::now() + options_.connect_timeout;
  UniqueFd fd = net::connect_tcp(options_.host, options_.port, until, endpoint_);
  const net::Mac key = net::client_handshake(fd.get(), options_.secret, until, endpoint_);
  auto conn = std::make_unique<Connection>(std::move(fd), key, options_.max_frame_bytes, endpoint_);
  wire::Open req = options_.request;
  req.start = position_;
  conn->channel.send(wire::encode(req), until);
  std::string reply = conn->channel.recv(SteadyClock::now() + options_.io_timeout, options_.io_timeout);
  if (wire::kind_of(reply, endpoint_) == wire::Kind::kError) {
    std::uint32_t code;
    std::string message;
    wire::decode_error(reply, endpoint_, &code, &message);
    throw Error(static_cast<ErrorCode>(code), endpoint_ + " refused the stream: " + message);
  }
  wire::Header h = wire::decode_header(reply, endpoint_);
  if (have_header_ && (h.total != header_.total || h.fingerprint != header_.fingerprint)) {
    throw_mismatch(endpoint_ + " came back serving other data (" + std::to_string(h.total) +
                   " samples for this rank instead of " + std::to_string(header_.total) +
                   ", or other shards): cannot resume the stream");
  }
  header_ = h;
  have_header_ = true;
  chunk_.reset();
  conn_ = std::move(conn);
}

void DataClient::reopen_with_retry(const std::string& why) {
  Millis backoff(50);
  std::string last = why;
  for (int attempt = 0;; ++attempt) {
    try {
      open_stream();
      if (!why.empty()) {
        ++reconnects_;
        options_.logger.warn("data", "reconnected to " + endpoint_ + " at sample " +
                                         std::to_string(position_) + " after: " + why);
      }
      return;
    } catch (const Error& e) {
      // A wrong secret, another protocol or another dataset will not heal.
      if (e.code() == ErrorCode::kAuth || e.code() == ErrorCode::kMismatch ||
          e.code() == ErrorCode::kInvalidArgument) {
        throw;
      }
      last = e.what();
    }
    if (attempt >= options_.max_reconnects) {
      throw_peer_failure("lost " + endpoint_ + " at sample " + std::to_string(position_) + " of " +
                         std::to_string(header_.total) + " and " + std::to_string(attempt + 1) +
                         " attempts to reconnect failed; last: " + last);
    }
    std::this_thread::sleep_for(backoff);
    backoff = std::min(backoff * 2, Millis(2000));
  }
}

std::optional<RawSample> DataClient::next() {
  while (true) {
    if (chunk_ && in_chunk_ < chunk_->samples.size()) {
      ++position_;
      return std::move(chunk_->samples[in_chunk_++]);
    }
    if (ended_ || position_ >= header_.total) {
      ended_ = true;
      conn_.reset();
      return std::nullopt;
    }
    std::string bytes;
    try {
      if (!conn_) throw_peer_failure("not connected");
      bytes = conn_->channel.recv(SteadyClock::now() + options_.io_timeout, options_.io_timeout);
    } catch (const Error& e) {
      if (e.code() != ErrorCode::kPeerFailure && e.code() != ErrorCode::kTimeout &&
          e.code() != ErrorCode::kIo) {
        throw;
      }
      reopen_with_retry(e.what());
      continue;
    }
    switch (wire::kind_of(bytes, endpoint_)) {
      case wire::Kind::kChunk: {
        wire::Chunk c = wire::decode_chunk(bytes, endpoint_);
        if (c.first != position_) {
          throw_data_corrupt(endpoint_ + " sent samples from position " + std::to_string(c.first) +
                             " when " + std::to_string(position_) + " was next");
        }
        chunk_ = std::move(c);
        in_chunk_ = 0;
        break;
      }
      case wire::Kind::kEnd:
        if (wire::decode_end(bytes, endpoint_) != position_) {
          throw_data_corrupt(endpoint_ + " ended the stream at " + std::to_string(position_) +
                             " samples, short of its total");
        }
        ended_ = true;
        break;
      case wire::Kind::kError: {
        std::uint32_t code;
        std::string message;
        wire::decode_error(bytes, endpoint_, &code, &message);
        throw Error(static_cast<ErrorCode>(code), endpoint_ + ": " + message);
      }
      default:
        throw_data_corrupt(endpoint_ + " sent an unexpected message mid-stream");
    }
  }
}

}  // namespace hpct::data
