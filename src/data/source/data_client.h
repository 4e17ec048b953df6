// The client side of the data server protocol (data_server.h): one rank's
// stream of samples for one epoch, which survives the server going away.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "core/clock.h"
#include "core/log.h"
#include "data/serve/data_wire.h"
#include "data/sample.h"

namespace hpct::data {

struct DataClientOptions {
  std::string host = "127.0.0.1";
  int port = 0;
  std::string secret;
  wire::Open request;                // rank, size, seed, epoch, split options (start is managed)
  int max_reconnects = 10;           // consecutive failed attempts before giving up
  Millis connect_timeout{30000};     // per attempt
  Millis io_timeout{60000};          // longest silence from the server mid-stream
  size_t max_frame_bytes = 64u << 20;
  Logger logger;
};

// Not thread-safe: one consumer. Owns its connection.
class DataClient {
 public:
  // Connects and opens the stream at `start` (blocks, with the reconnect
  // rules below). Auth when the secret is wrong; Mismatch when the server
  // speaks another protocol.
  DataClient(DataClientOptions options, std::uint64_t start);
  ~DataClient();
  DataClient(const DataClient&) = delete;
  DataClient& operator=(const DataClient&) = delete;

  // The next sample in plan order, or nullopt after the last. When the
  // server closes, resets or falls silent, reconnects (up to max_reconnects
  // attempts in a row, backing off 50 ms to 2 s) and reopens at position(),
  // so no sample is lost or repeated; PeerFailure when the attempts run out.
  // An Error reply from the server is raised with its code.
  std::optional<RawSample> next();

  const wire::Header& header() const { return header_; }
  std::uint64_t position() const { return position_; }   // samples received
  std::uint64_t reconnects() const { return reconnects_; }

 private:
  struct Connection;
  void open_stream();        // one attempt
  void reopen_with_retry(const std::string& why);
  DataClientOptions options_;
  std::string endpoint_;
  std::unique_ptr<Connection> conn_;
  wire::Header header_;
  bool have_header_ = false;
  std::uint64_t position_ = 0;
  std::uint64_t reconnects_ = 0;
  std::optional<wire::Chunk> chunk_;
  size_t in_chunk_ = 0;
  bool ended_ = false;
};

}  // namespace hpct::data
