// The Loader's state (loader.h), shared by its pipeline (loader.cc: the
// epoch's plan, the decode threads, the remote stream) and its resume
// position (loader_state.cc). Private to src/data/.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <exception>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "data/decode/fields.h"
#include "data/loader.h"
#include "data/sampler.h"
#include "data/shard_index.h"
#include "data/source/data_client.h"

namespace hpct::data {

// What a decode thread makes of one batch.
struct Result {
  Batch batch;
  std::exception_ptr error;
  std::uint64_t skipped = 0;
  std::vector<std::string> errors;
  bool on_device = false;  // batch already copied to LoaderOptions::device (ahead)
};

struct Loader::Impl {
  explicit Impl(LoaderOptions opts) : o(std::move(opts)) {}
  ~Impl() { stop_threads(); }

  void set_epoch(std::int64_t e, std::int64_t delivered_batches);
  // GPUs (LoaderOptions::device): copies a batch to the device, and issues
  // the copy of batch b if it is decoded already. Consumer thread only.
  void to_device(Result* r) const;
  void copy_ahead(std::int64_t b);
  void ensure_started();
  // fs->will_read of the shards and byte ranges of plan positions [from, to)
  void announce_reads(std::uint64_t from, std::uint64_t to);
  std::uint64_t next_position() const;  // the plan position after the batches delivered
  void open_remote();  // remote: opens this epoch's stream once
  void stop_threads();
  void worker();
  void receiver(std::uint64_t generation, std::int64_t first_batch,
                std::shared_ptr<DataClient> client);
  DataClientOptions client_options(std::int64_t e) const {
    DataClientOptions co;
    co.host = host;
    co.port = port;
    co.secret = o.secret;
    co.request = {static_cast<std::uint32_t>(o.rank), static_cast<std::uint32_t>(o.size), o.seed, e, 0,
                  o.shuffle, o.shuffle_buffer, o.shuffle_initial, o.drop_last};
    co.max_reconnects = o.max_reconnects;
    co.connect_timeout = o.connect_timeout;
    co.logger = o.logger;
    return co;
  }
  Result build(std::int64_t b, std::vector<RawSample> raw);
  std::vector<RawSample> fetch_local(std::int64_t b, Result* r);
  std::uint64_t fingerprint() const { return remote ? remote_fingerprint : index->fingerprint(); }
  void sample_failed(Result* r, const Error& e);

  LoaderOptions o;
  FieldOptions fields;
  std::shared_ptr<const ShardIndex> index;  // local shards
  bool remote = false;
  std::string host;
  int port = 0;
  std::uint64_t remote_fingerprint = 0;
  std::uint64_t remote_index_skipped = 0;
  std::unique_ptr<DataClient> pending;  // remote: the stream open_remote opened
  bool stream_open = false;             // remote: this epoch's stream was opened
  std::int64_t stream_first_batch = 0;  // remote: where it starts

  std::int64_t epoch = 0;
  RankPlan plan;               // local only: this rank's epoch
  bool elastic = false;        // plan by global batch from elastic_consumed
  std::uint64_t elastic_consumed = 0;
  std::uint64_t total = 0;     // samples this rank gets this epoch
  std::uint64_t padded = 0;
  std::int64_t batches = 0;

  mutable std::mutex mu;
  std::condition_variable cv;
  bool running = false;                            // guarded by mu
  bool stopping = false;                           // guarded by mu
  std::uint64_t generation = 0;                    // guarded by mu: bumped when work is discarded
  std::int64_t next_claim = 0;                     // guarded by mu
  std::int64_t delivered = 0;                      // guarded by mu
  std::map<std::int64_t, Result> ready;            // guarded by mu
  std::map<std::int64_t, std::vector<RawSample>> raw;  // guarded by mu (remote)
  std::exception_ptr receiver_error;               // guarded by mu
  std::uint64_t reconnects = 0;                    // guarded by mu
  std::vector<std::thread> threads;

  LoaderStats stats;  // consumer thread only
  bool reported = false;
};

}  // namespace hpct::data
