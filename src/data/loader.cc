#include "data/loader.h"

#include <sched.h>

#include <ATen/ATen.h>

#include <algorithm>
#include <condition_variable>
#include <exception>
#include <map>
#include <mutex>
#include <thread>

#include "core/error.h"
#include "data/bytes.h"
#include "data/source/data_client.h"
#include "data/decode/fields.h"
#include "data/loader_impl.h"
#include "data/random.h"
#include "data/sampler.h"
#include "data/shard_index.h"
#include "data/source/shard_list.h"

namespace hpct::data {
namespace {

constexpr size_t kMaxErrorsKept = 20;
constexpr Millis kWaitSlice(500);  // internal waits re-check the stop flag this often

}  // namespace

void Loader::Impl::set_epoch(std::int64_t e, std::int64_t delivered_batches) {
  stop_threads();
  epoch = e;
  if (remote) {
    // The stream opens on first use (open_remote), so a loader constructed
    // and then moved to another epoch never opens one it drops.
    stream_open = false;
    stream_first_batch = delivered_batches;
    pending.reset();
    total = padded = 0;
  } else {
    SplitOptions s;
    s.rank = o.rank;
    s.size = o.size;
    s.seed = o.seed;
    s.shuffle = o.shuffle;
    s.shuffle_buffer = o.shuffle_buffer;
    s.shuffle_initial = o.shuffle_initial;
    s.drop_last = o.drop_last;
    plan = elastic ? plan_epoch_elastic(index->shard_samples(), s, e, elastic_consumed, o.batch_size)
                   : plan_epoch(index->shard_samples(), s, e);
    total = plan.order.size();
    padded = plan.padded;
  }
  batches = remote ? 0 : batch_count(total, o.batch_size, o.drop_last);
  std::lock_guard<std::mutex> lock(mu);
  delivered = delivered_batches;
  next_claim = delivered_batches;
  ready.clear();
  raw.clear();
  receiver_error = nullptr;
  stats = LoaderStats();
  stats.epoch = e;
  stats.padded = padded;
  stats.index_skipped = remote ? remote_index_skipped : index->stats().skipped_samples;
  if (!remote) stats.errors = index->stats().errors;  // damage found while indexing comes first
  stats.reconnects = reconnects;
  reported = false;
}

void Loader::Impl::open_remote() {
  if (!remote || stream_open) return;
  // The server tells the count when the stream opens; the receiving thread
  // takes the open stream over.
  pending = std::make_unique<DataClient>(client_options(epoch),
                                         static_cast<std::uint64_t>(stream_first_batch) * o.batch_size);
  total = pending->header().total;
  padded = pending->header().padded;
  remote_fingerprint = pending->header().fingerprint;
  remote_index_skipped = pending->header().index_skipped;
  batches = batch_count(total, o.batch_size, o.drop_last);
  stats.padded = padded;
  stats.index_skipped = remote_index_skipped;
  stream_open = true;
}

void Loader::Impl::stop_threads() {
  {
    std::lock_guard<std::mutex> lock(mu);
    stopping = true;
    ++generation;
    cv.notify_all();
  }
  for (auto& t : threads) t.join();
  threads.clear();
  std::lock_guard<std::mutex> lock(mu);
  stopping = false;
  running = false;
}

void Loader::Impl::announce_reads(std::uint64_t from, std::uint64_t to) {
  // The shards of this rank's plan positions [from, to), in the order it
  // reads them, and the bytes it reads of each (its part of the epoch may
  // begin and end mid-shard), so a remote file system fetches those bytes
  // first and no others (source/remote_fs.h).
  const size_t shards = index->shards().size();
  std::vector<std::uint32_t> order;
  std::vector<ReadRange> range(shards, ReadRange{UINT64_MAX, 0});
  to = std::min<std::uint64_t>(to, plan.order.size());
  for (std::uint64_t pos = from; pos < to; ++pos) {
    const SampleRef& ref = index->sample(plan.order[pos]);
    ReadRange& r = range[ref.shard];
    if (r.first == UINT64_MAX) order.push_back(ref.shard);
    for (const auto& f : ref.fields) {
      r.first = std::min(r.first, f.header_offset);
      // A TFRecord frame ends 4 bytes (its CRC) past its data.
      r.end = std::max(r.end, f.data_offset + f.size + 4);
    }
  }
  std::vector<std::string> paths;
  std::vector<ReadRange> ranges;
  for (std::uint32_t shard : order) {
    paths.push_back(index->shards()[shard]);
    ranges.push_back(range[shard]);
  }
  o.fs->will_read(paths, ranges);
}

void Loader::Impl::ensure_started() {
  open_remote();
  std::int64_t first;
  std::uint64_t gen;
  {
    std::lock_guard<std::mutex> lock(mu);
    if (running) return;
    running = true;
    first = delivered;
    gen = generation;
  }
  if (first >= batches) return;
  if (!remote) announce_reads(static_cast<std::uint64_t>(first) * o.batch_size, UINT64_MAX);
  for (int i = 0; i < o.threads; ++i) threads.emplace_back([this] { worker(); });
  if (remote) {
    // The stream set_epoch opened starts where this epoch resumes.
    std::shared_ptr<DataClient> c(pending.release());
    threads.emplace_back([this, gen, first, c] { receiver(gen, first, c); });
  }
}

void Loader::Impl::receiver(std::uint64_t gen, std::int64_t first_batch,
                            std::shared_ptr<DataClient> owned) {
  try {
    if (!owned) {
      owned = std::make_shared<DataClient>(client_options(epoch),
                                           static_cast<std::uint64_t>(first_batch) * o.batch_size);
    }
    DataClient& client = *owned;
    std::uint64_t seen_reconnects = 0;
    for (std::int64_t b = first_batch; b < batches; ++b) {
      {
        std::unique_lock<std::mutex> lock(mu);
        while (!stopping && generation == gen && b >= delivered + o.prefetch) cv.wait_for(lock, kWaitSlice);
        if (stopping || generation != gen) return;
      }
      std::vector<RawSample> samples;
      const std::uint64_t end = std::min<std::uint64_t>(total, static_cast<std::uint64_t>(b + 1) * o.batch_size);
      while (client.position() < end) {
        auto s = client.next();
        if (!s) throw_data_corrupt("the data server ended the stream early");
        samples.push_back(std::move(*s));
      }
      std::lock_guard<std::mutex> lock(mu);
      if (generation != gen) return;
      reconnects += client.reconnects() - seen_reconnects;
      seen_reconnects = client.reconnects();
      raw[b] = std::move(samples);
      cv.notify_all();
    }
  } catch (...) {
    std::lock_guard<std::mutex> lock(mu);
    if (generation == gen) receiver_error = std::current_exception();
    cv.notify_all();
  }
}

void Loader::Impl::worker() {
  if (o.idle_priority) {
    // Best effort: Linux applies this to the calling thread only.
    sched_param param{};
    param.sched_priority = 0;
    ::sched_setscheduler(0, SCHED_IDLE, &param);
  }
  while (true) {
    std::int64_t b;
    std::uint64_t gen;
    std::vector<RawSample> samples;
    {
      std::unique_lock<std::mutex> lock(mu);
      while (!stopping && next_claim < batches && next_claim >= delivered + o.prefetch) {
        cv.wait_for(lock, kWaitSlice);
      }
      if (stopping || next_claim >= batches) return;
      b = next_claim++;
      gen = generation;
      if (remote) {
        while (!stopping && generation == gen && !raw.count(b) && !receiver_error) cv.wait_for(lock, kWaitSlice);
        if (stopping || generation != gen) return;
        if (receiver_error) {
          Result r;
          r.error = receiver_error;
          ready[b] = std::move(r);
          cv.notify_all();
          return;
        }
        samples = std::move(raw[b]);
        raw.erase(b);
      }
    }
    Result r;
    try {
      Result fetched;  // samples that could not be read (skip)
      if (!remote) samples = fetch_local(b, &fetched);
      r = build(b, std::move(samples));
      r.skipped += fetched.skipped;
      r.errors.insert(r.errors.begin(), fetched.errors.begin(), fetched.errors.end());
    } catch (...) {
      r.error = std::current_exception();
    }
    std::lock_guard<std::mutex> lock(mu);
    if (gen != generation) continue;  // discarded (epoch changed); the next claim sees stopping
    ready[b] = std::move(r);
    cv.notify_all();
  }
}

void Loader::Impl::sample_failed(Result* r, const Error& e) {
  if (o.on_error == OnError::kFail) throw e;
  ++r->skipped;
  if (r->errors.size() < kMaxErrorsKept) r->errors.push_back(e.what());
}

std::vector<RawSample> Loader::Impl::fetch_local(std::int64_t b, Result* r) {
  std::vector<RawSample> out;
  const std::uint64_t begin = static_cast<std::uint64_t>(b) * o.batch_size;
  const std::uint64_t end = std::min<std::uint64_t>(total, begin + o.batch_size);
  out.reserve(end - begin);
  for (std::uint64_t pos = begin; pos < end; ++pos) {
    try {
      out.push_back(index->read(plan.order[pos]));
    } catch (const Error& e) {
      sample_failed(r, e);
    }
  }
  return out;
}

Result Loader::Impl::build(std::int64_t b, std::vector<RawSample> samples) {
  // Each sample is decoded into one scratch image (its buffer reused) and
  // written straight into its slot of the batch tensor, which is allocated
  // when the first sample gives the shape.
  Result r;
  Image scratch;
  std::vector<std::int64_t> labels;
  std::vector<std::string> keys;
  labels.reserve(samples.size());
  const std::uint64_t first_pos = static_cast<std::uint64_t>(b) * o.batch_size;
  at::Tensor images;
  int h = 0, w = 0, c = 0;
  size_t plane = 0;
  for (size_t i = 0; i < samples.size(); ++i) {
    std::int64_t label;
    try {
      label = decode_sample_into(samples[i], fields, &scratch);
      if (o.augment.any()) {
        Rng rng = Rng::from({o.seed, static_cast<std::uint64_t>(epoch), samples[i].id, first_pos + i});
        scratch = augment(std::move(scratch), o.augment, rng);
      }
    } catch (const Error& e) {
      sample_failed(&r, e);
      continue;
    }
    if (!images.defined()) {
      h = scratch.height;
      w = scratch.width;
      c = scratch.channels;
      plane = static_cast<size_t>(h) * w;
      const std::int64_t rows = static_cast<std::int64_t>(samples.size());
      images = at::empty({rows, c, h, w},
                         at::TensorOptions(o.normalize ? at::kFloat : at::kByte).pinned_memory(o.pin_memory));
      if (o.normalize && ((o.mean.size() != 1 && o.mean.size() != static_cast<size_t>(c)) ||
                          (o.std.size() != 1 && o.std.size() != static_cast<size_t>(c)))) {
        throw_invalid_argument("normalize: " + std::to_string(o.mean.size()) + " means and " +
                               std::to_string(o.std.size()) + " stds for " + std::to_string(c) +
                               " channels");
      }
    } else if (scratch.height != h || scratch.width != w || scratch.channels != c) {
      throw_mismatch("sample " + samples[i].key + " is " + std::to_string(scratch.height) + "x" +
                     std::to_string(scratch.width) + "x" + std::to_string(scratch.channels) +
                     " but sample " + keys[0] + " of the same batch is " + std::to_string(h) + "x" +
                     std::to_string(w) + "x" + std::to_string(c) +
                     ": set a resize or crop size, or channels");
    }
    const size_t slot = keys.size();
    const std::uint8_t* px = scratch.pixels.data();
    if (o.normalize) {
      float* dst = images.data_ptr<float>() + slot * c * plane;
      for (int k = 0; k < c; ++k) {
        const float sd = o.std[o.std.size() == 1 ? 0 : k], mean = o.mean[o.mean.size() == 1 ? 0 : k];
        const float scale = 1.0f / (255.0f * sd), shift = mean / sd;
        for (size_t p = 0; p < plane; ++p) dst[k * plane + p] = px[p * c + k] * scale - shift;
      }
    } else {
      std::uint8_t* dst = images.data_ptr<std::uint8_t>() + slot * c * plane;
      if (c == 1) {
        std::copy_n(px, plane, dst);
      } else if (c == 3) {  // the common case, in one pass over the pixels
        std::uint8_t *red = dst, *green = dst + plane, *blue = dst + 2 * plane;
        for (size_t p = 0; p < plane; ++p) {
          red[p] = px[3 * p];
          green[p] = px[3 * p + 1];
          blue[p] = px[3 * p + 2];
        }
      } else {
        for (int k = 0; k < c; ++k) {
          for (size_t p = 0; p < plane; ++p) dst[k * plane + p] = px[p * c + k];
        }
      }
    }
    labels.push_back(label);
    keys.push_back(samples[i].key);
  }
  const std::int64_t n = static_cast<std::int64_t>(keys.size());
  if (!images.defined()) images = at::empty({0, 0, 0, 0}, o.normalize ? at::kFloat : at::kByte);
  if (n < images.size(0)) {  // skipped samples
    images = images.narrow(0, 0, n).contiguous();
    if (o.pin_memory) images = images.pin_memory();
  }
  r.batch.images = std::move(images);
  r.batch.labels = at::empty({n}, at::TensorOptions(at::kLong).pinned_memory(o.pin_memory));
  std::copy(labels.begin(), labels.end(), r.batch.labels.data_ptr<std::int64_t>());
  r.batch.max_label = labels.empty() ? -1 : *std::max_element(labels.begin(), labels.end());
  r.batch.epoch = epoch;
  r.batch.index = b;
  r.batch.keys = std::move(keys);
  return r;
}

Loader::Loader(LoaderOptions options) : impl_(std::make_unique<Impl>(std::move(options))) {
  Impl& m = *impl_;
  auto& o = m.o;
  if (o.batch_size < 1) throw_invalid_argument("batch size must be at least 1");
  if (o.threads < 1) throw_invalid_argument("the loader needs at least 1 decode thread");
  if (o.prefetch < 1) throw_invalid_argument("prefetch must be at least 1 batch");
  if (o.size < 1 || o.rank < 0 || o.rank >= o.size) {
    throw_invalid_argument("loader: rank " + std::to_string(o.rank) + " of " + std::to_string(o.size) +
                           " is not a rank");
  }
  m.fields.image_fields = o.image_fields;
  m.fields.label_fields = o.label_fields;
  m.fields.example_image_features = o.example_image_features;
  m.fields.example_label_features = o.example_label_features;
  m.fields.channels = o.channels;
  std::vector<std::string> shards = expand_shard_list(o.shards, *o.fs);
  if (shards.empty()) throw_invalid_argument("loader: no shards given");
  if (parse_tcp_source(shards[0], &m.host, &m.port)) {
    if (shards.size() != 1) throw_invalid_argument("loader: a data server must be the only source");
    if (o.secret.empty()) throw_invalid_argument("loader: a data server needs the job secret");
    m.remote = true;
  } else {
    m.index = ShardIndex::build(shards, o.fs, o.on_error, o.logger);
  }
  m.set_epoch(0, 0);
}

Loader::~Loader() = default;

void Loader::start_epoch(std::int64_t epoch) { impl_->set_epoch(epoch, 0); }

void Loader::start_elastic_epoch(std::int64_t epoch, std::uint64_t consumed, int rank, int size) {
  Impl& m = *impl_;
  if (m.remote) throw_invalid_argument("an elastic job reads local shards; a data server cannot re-split an epoch");
  if (size < 1 || rank < 0 || rank >= size) {
    throw_invalid_argument("loader: rank " + std::to_string(rank) + " of " + std::to_string(size) + " is not a rank");
  }
  m.stop_threads();
  m.o.rank = rank;
  m.o.size = size;
  m.elastic = true;
  m.elastic_consumed = consumed;
  m.set_epoch(epoch, 0);
}

std::uint64_t Loader::Impl::next_position() const {
  std::lock_guard<std::mutex> lock(mu);
  return static_cast<std::uint64_t>(delivered) * o.batch_size;
}

void Loader::prefetch() {
  Impl& m = *impl_;
  if (!m.remote) m.announce_reads(m.next_position(), UINT64_MAX);
}

bool Loader::peek(Batch* batch) {
  Impl& m = *impl_;
  if (m.remote) return false;
  std::uint64_t pos = m.next_position();
  constexpr std::uint64_t kMaxPassedOver = 64;
  m.announce_reads(pos, pos + kMaxPassedOver + 1);
  for (std::uint64_t tries = 0; pos < m.total && tries <= kMaxPassedOver; ++pos, ++tries) {
    Result r;
    try {
      std::vector<RawSample> one;
      one.push_back(m.index->read(m.plan.order[pos]));
      r = m.build(static_cast<std::int64_t>(pos / m.o.batch_size), std::move(one));
    } catch (const Error& e) {
      m.sample_failed(&r, e);
    }
    if (r.error) std::rethrow_exception(r.error);
    if (r.batch.keys.empty()) continue;  // skipped: damaged
    *batch = std::move(r.batch);
    return true;
  }
  return false;
}

bool Loader::next(Batch* batch) {
  Impl& m = *impl_;
  m.ensure_started();
  Result r;
  {
    std::unique_lock<std::mutex> lock(m.mu);
    if (m.delivered >= m.batches) {
      lock.unlock();
      if (!m.reported) {
        m.reported = true;
        if (m.stats.skipped > 0 || m.stats.index_skipped > 0) {
          m.o.logger.warn("data", "epoch " + std::to_string(m.epoch) + ": skipped " +
                                      std::to_string(m.stats.skipped) + " damaged samples (and " +
                                      std::to_string(m.stats.index_skipped) +
                                      " lost to damaged shards); first: " +
                                      (m.stats.errors.empty() ? "-" : m.stats.errors[0]));
        }
      }
      return false;
    }
    const std::int64_t b = m.delivered;
    if (!m.cv.wait_for(lock, m.o.timeout, [&] { return m.ready.count(b) > 0; })) {
      throw_timeout("data loader: batch " + std::to_string(b) + " of epoch " + std::to_string(m.epoch) +
                    " was not ready within " + std::to_string(m.o.timeout.count()) + " ms");
    }
    r = std::move(m.ready[b]);
    m.ready.erase(b);
    ++m.delivered;
    m.stats.reconnects = m.reconnects;
    m.cv.notify_all();
  }
  m.stats.skipped += r.skipped;
  for (auto& e : r.errors) {
    if (m.stats.errors.size() < kMaxErrorsKept) m.stats.errors.push_back(std::move(e));
  }
  if (r.error) std::rethrow_exception(r.error);
  m.stats.samples += r.batch.keys.size();
  if (!m.o.device.is_cpu()) {
    if (!r.on_device) m.to_device(&r);
    m.copy_ahead(r.batch.index + 1);
  }
  *batch = std::move(r.batch);
  return true;
}

void Loader::Impl::to_device(Result* r) const {
  // non_blocking from pinned memory: the host goes on while the copy runs
  // (the caching host allocator keeps the pinned block until it is done).
  r->batch.images = r->batch.images.to(o.device, /*non_blocking=*/o.pin_memory);
  r->batch.labels = r->batch.labels.to(o.device, /*non_blocking=*/o.pin_memory);
  r->on_device = true;
}

void Loader::Impl::copy_ahead(std::int64_t b) {
  Result* next = nullptr;
  {
    std::lock_guard<std::mutex> lock(mu);
    auto it = ready.find(b);
    if (it == ready.end() || it->second.error || it->second.on_device) return;
    next = &it->second;  // a map node stays put; only this (the consumer's) thread erases it
  }
  to_device(next);
}

std::int64_t Loader::epoch() const { return impl_->epoch; }
std::int64_t Loader::batches_per_epoch() const {
  impl_->open_remote();
  return impl_->batches;
}
std::uint64_t Loader::samples_per_epoch() const {
  impl_->open_remote();
  return impl_->total;
}
LoaderStats Loader::stats() const { return impl_->stats; }

void apply_config(const Config& config, LoaderOptions* o) {
  if (config.data_prefetch < 1) {
    throw_invalid_argument("HPCT_DATA_PREFETCH must be at least 1, got " +
                           std::to_string(config.data_prefetch));
  }
  if (config.data_shuffle_buffer < 1) {
    throw_invalid_argument("HPCT_DATA_SHUFFLE_BUFFER must be at least 1 (1: no shuffling), got " +
                           std::to_string(config.data_shuffle_buffer));
  }
  if (config.data_reconnects < 0) {
    throw_invalid_argument("HPCT_DATA_RECONNECTS must be >= 0, got " +
                           std::to_string(config.data_reconnects));
  }
  o->prefetch = static_cast<int>(config.data_prefetch);
  o->shuffle_buffer = static_cast<size_t>(config.data_shuffle_buffer);
  o->shuffle_initial = std::min(o->shuffle_initial, o->shuffle_buffer);
  o->on_error = parse_on_error(config.data_on_error);
  o->max_reconnects = static_cast<int>(config.data_reconnects);
  o->idle_priority = config.data_idle_priority;
}

}  // namespace hpct::data
