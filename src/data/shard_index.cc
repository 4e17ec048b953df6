#include "data/shard_index.h"

#include <atomic>
#include <mutex>
#include <optional>

#include "core/error.h"
#include "data/random.h"
#include "data/formats/tar.h"
#include "data/formats/shard_toc.h"
#include "data/formats/tfrecord.h"
#include "data/source/http.h"
#include "data/source/url.h"

namespace hpct::data {
namespace {

constexpr size_t kMaxErrorsKept = 20;

std::uint64_t hash_string(std::uint64_t h, const std::string& s) {
  for (unsigned char c : s) h = Rng::mix(h ^ c);
  return Rng::mix(h ^ s.size());
}

std::string base_name(const std::string& path) {
  const size_t slash = path.rfind('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

// Groups a tar shard's members, in archive order, into samples (members
// sharing a key are one sample).
class SampleGrouper {
 public:
  SampleGrouper(std::uint32_t shard, std::vector<SampleRef>* samples) : shard_(shard), samples_(samples) {}
  void add(const TarMember& m) {
    std::string key, ext;
    split_member_name(m.name, &key, &ext);
    if (open_ && key != cur_.key) close_sample();
    if (!open_) {
      cur_.key = key;
      cur_.shard = shard_;
      open_ = true;
    }
    cur_.fields.push_back({ext, m.index, m.header_offset, m.data_offset, m.size});
  }
  // Ends the last sample; returns the shard's sample count.
  std::uint64_t finish() {
    if (open_) close_sample();
    return count_;
  }
  // Drops the sample being gathered (damage hit it); returns the count.
  std::uint64_t abandon() {
    open_ = false;
    cur_ = SampleRef();
    return count_;
  }

 private:
  void close_sample() {
    samples_->push_back(std::move(cur_));
    ++count_;
    cur_ = SampleRef();
    open_ = false;
  }
  std::uint32_t shard_;
  std::vector<SampleRef>* samples_;
  SampleRef cur_;
  bool open_ = false;
  std::uint64_t count_ = 0;
};

// Appends a tar shard's samples; returns how many. With kSkip, damage ends
// the shard: the sample being read when it hit is lost, and so is the rest,
// whose member boundaries can no longer be trusted.
std::uint64_t index_tar_file(const RandomAccessFile& file, std::uint32_t shard, OnError on_error,
                             const Logger& log, std::vector<SampleRef>* samples, ShardIndexStats* stats) {
  TarScanner scan(file);
  SampleGrouper group(shard, samples);
  try {
    while (auto m = scan.next()) group.add(*m);
  } catch (const Error& e) {
    if (on_error == OnError::kFail) throw;
    ++stats->skipped_samples;
    ++stats->damaged_shards;
    if (stats->errors.size() < kMaxErrorsKept) stats->errors.push_back(e.what());
    log.warn("data", std::string("skipping the rest of a damaged shard: ") + e.what());
    return group.abandon();
  }
  return group.finish();
}

// Appends a shard's samples from its sidecar; returns how many.
std::uint64_t index_from_toc(const ShardToc& toc, std::uint32_t shard, const std::string& path,
                             std::vector<SampleRef>* samples) {
  if (!toc.tfrecord) {
    SampleGrouper group(shard, samples);
    for (const auto& m : toc.members) group.add(m);
    return group.finish();
  }
  const std::string prefix = base_name(path) + "#";
  for (const auto& m : toc.members) {
    SampleRef ref;
    ref.key = prefix + std::to_string(m.index);
    ref.shard = shard;
    ref.fields.push_back({kTfRecordField, m.index, m.header_offset, m.data_offset, m.size});
    samples->push_back(std::move(ref));
  }
  return toc.members.size();
}

// The sidecars of the remote shards, fetched side by side; nullopt for a
// shard without one (or with one that cannot be used: warned, then walked).
std::vector<std::optional<ShardToc>> read_tocs(const std::vector<std::string>& shards, FileSystem& fs,
                                               const Logger& log) {
  std::vector<std::optional<ShardToc>> tocs(shards.size());
  std::vector<std::string> paths;
  for (const auto& s : shards) {
    if (is_remote_url(s)) paths.push_back(toc_path(s));
  }
  if (paths.empty() || !fs.sidecars()) return tocs;
  fs.will_read(paths);
  for (size_t i = 0; i < shards.size(); ++i) {
    if (!is_remote_url(shards[i])) continue;
    const std::string path = toc_path(shards[i]);
    try {
      const std::string text = read_whole_file(fs, path);
      ShardToc toc = parse_toc(text, path);
      if (toc.tfrecord != is_tfrecord_path(shards[i])) {
        throw_data_corrupt(path + ": it indexes a " + (toc.tfrecord ? "TFRecord file" : "tar shard") +
                           ", but " + shards[i] + " is not one; remake it with `hpctrain data index`");
      }
      tocs[i] = std::move(toc);
    } catch (const NotFoundError&) {
      // No sidecar: the shard is walked.
    } catch (const Error& e) {
      // The shard is walked instead. A sidecar that is not one is worth a
      // warning; a request that failed (wrong credentials, no bucket) fails
      // the shard's own read next, which names the shard.
      const std::string what = std::string("ignoring a shard's sidecar index, reading the shard instead: ") + e.what();
      if (e.code() == ErrorCode::kDataCorrupt) {
        log.warn("data", what);
      } else {
        log.debug("data", what);
      }
    }
  }
  return tocs;
}

// Appends a TFRecord file's records as samples; returns how many. Framing
// damage throws with kFail; with kSkip the reader stops at it and the file
// keeps the records before it.
std::uint64_t index_tfrecord_file(const RandomAccessFile& file, std::uint32_t shard,
                                  const std::string& path, OnError on_error, const Logger& log,
                                  std::vector<SampleRef>* samples, ShardIndexStats* stats) {
  TfRecordReader reader(file, on_error, log);
  const std::string prefix = base_name(path) + "#";
  std::uint64_t count = 0;
  while (auto frame = reader.next_frame()) {
    SampleRef ref;
    ref.key = prefix + std::to_string(frame->number);
    ref.shard = shard;
    ref.fields.push_back({kTfRecordField, frame->number, frame->offset, frame->offset + 12, frame->length});
    samples->push_back(std::move(ref));
    ++count;
  }
  if (reader.stats().stopped_early) {
    // The record whose frame failed is lost, with whatever follows it.
    ++stats->skipped_samples;
    ++stats->damaged_shards;
    for (const auto& e : reader.stats().errors) {
      if (stats->errors.size() < kMaxErrorsKept) stats->errors.push_back(e);
    }
  }
  return count;
}

}  // namespace

struct ShardIndex::ShardFile {
  std::unique_ptr<RandomAccessFile> file;  // set at build (walked) or on the first read (lazy)
  bool lazy = false;                       // indexed from its sidecar
  std::uint64_t toc_bytes = 0;             // the size its sidecar gives
  std::mutex mu;                           // guards a lazy open
  std::atomic<const RandomAccessFile*> ready{nullptr};
};

ShardIndex::ShardIndex() = default;
ShardIndex::~ShardIndex() = default;

std::shared_ptr<const ShardIndex> ShardIndex::build(const std::vector<std::string>& shards,
                                                    std::shared_ptr<FileSystem> fs,
                                                    OnError on_error, const Logger& log) {
  auto index = std::make_shared<ShardIndex>();
  index->shards_ = shards;
  index->fs_ = fs;
  std::vector<std::optional<ShardToc>> tocs = read_tocs(shards, *fs, log);
  std::vector<std::string> walked;
  for (size_t s = 0; s < shards.size(); ++s) {
    if (!tocs[s]) walked.push_back(shards[s]);
  }
  fs->will_read(walked);  // a remote file system starts downloading ahead of the walk
  std::uint64_t h = 0x48504354ull;
  size_t remote_walked = 0;
  for (size_t s = 0; s < shards.size(); ++s) {
    const auto shard = static_cast<std::uint32_t>(s);
    std::uint64_t count = 0;
    auto sf = std::make_unique<ShardFile>();
    index->tfrecord_.push_back(is_tfrecord_path(shards[s]));
    if (tocs[s]) {
      count = index_from_toc(*tocs[s], shard, shards[s], &index->samples_);
      sf->lazy = true;
      sf->toc_bytes = tocs[s]->shard_bytes;
      ++index->stats_.toc_shards;
    } else {
      remote_walked += is_remote_url(shards[s]) ? 1 : 0;
      try {
        sf->file = fs->open_read(shards[s]);
        if (index->tfrecord_.back()) {
          count = index_tfrecord_file(*sf->file, shard, shards[s], on_error, log, &index->samples_,
                                      &index->stats_);
        } else {
          count = index_tar_file(*sf->file, shard, on_error, log, &index->samples_, &index->stats_);
        }
      } catch (const Error& e) {
        if (on_error == OnError::kFail) throw;
        if (e.code() != ErrorCode::kIo) throw;
        ++index->stats_.damaged_shards;
        if (index->stats_.errors.size() < kMaxErrorsKept) index->stats_.errors.push_back(e.what());
        log.warn("data", std::string("skipping a shard that cannot be read: ") + e.what());
        sf->file.reset();
      }
      sf->ready.store(sf->file.get());
    }
    index->files_.push_back(std::move(sf));
    index->shard_samples_.push_back(count);
    h = hash_string(h, shards[s]);
    h = Rng::mix(h ^ count);
  }
  if (remote_walked > 0 && fs->sidecars()) {
    log.info("data", std::to_string(remote_walked) + " remote shard(s) have no sidecar index (<shard>" +
                         kTocSuffix + "), so each is read whole before the epoch starts, for want of "
                         "one (`hpctrain data index SHARDS` writes them)");
  } else if (index->stats_.toc_shards > 0) {
    log.debug("data", std::to_string(index->stats_.toc_shards) + " remote shard(s) indexed from their sidecars");
  }
  index->fingerprint_ = h;
  return index;
}

const RandomAccessFile& ShardIndex::file(std::uint32_t shard) const {
  ShardFile& f = *files_.at(shard);
  if (const RandomAccessFile* p = f.ready.load(std::memory_order_acquire)) return *p;
  std::lock_guard<std::mutex> lock(f.mu);
  if (const RandomAccessFile* p = f.ready.load(std::memory_order_acquire)) return *p;
  if (!f.lazy) throw Error(ErrorCode::kIo, "shard " + shards_[shard] + " could not be opened when it was indexed");
  auto opened = fs_->open_read(shards_[shard]);
  if (opened->size() != f.toc_bytes) {
    throw_data_corrupt("shard " + shards_[shard] + " is " + std::to_string(opened->size()) +
                       " bytes, but its sidecar " + toc_path(shards_[shard]) + " indexes " +
                       std::to_string(f.toc_bytes) +
                       " (the shard changed after the sidecar was made): remake it with "
                       "`hpctrain data index " + shards_[shard] + "`");
  }
  f.file = std::move(opened);
  f.ready.store(f.file.get(), std::memory_order_release);
  return *f.file;
}

RawSample ShardIndex::read(std::uint64_t id) const {
  const SampleRef& ref = samples_.at(id);
  const RandomAccessFile& f = file(ref.shard);
  const bool check_header = files_[ref.shard]->lazy;
  RawSample out;
  out.id = id;
  out.key = ref.key;
  out.shard = shards_[ref.shard];
  out.member_index = ref.fields.front().member_index;
  out.offset = ref.fields.front().header_offset;
  out.fields.reserve(ref.fields.size());
  if (tfrecord_[ref.shard]) {
    const FieldRef& fr = ref.fields.front();
    out.fields.emplace_back(kTfRecordField,
                            read_tfrecord_data(f, TfRecordFrame{fr.member_index, fr.header_offset, fr.size}));
    return out;
  }
  for (const auto& fr : ref.fields) {
    if (check_header) {
      // Read through a sidecar: the member's own header must agree with it.
      char copy[kTarBlock];
      const std::string name = ref.key + (fr.ext.empty() ? "" : "." + fr.ext);
      const char* block =
          fr.data_offset < kTarBlock ? nullptr : f.bytes_at(fr.data_offset - kTarBlock, kTarBlock, copy);
      if (block == nullptr || !tar_header_matches(block, name, fr.size)) {
        throw_data_corrupt("shard " + out.shard + ", member #" + std::to_string(fr.member_index) + " (" +
                           name + "), byte offset " + std::to_string(fr.header_offset) +
                           ": the shard's header there does not match its sidecar index (the shard "
                           "changed after the sidecar was made): remake it with `hpctrain data index " +
                           out.shard + "`");
      }
    }
    std::string bytes;
    if (!f.read_string(fr.data_offset, fr.size, &bytes)) {
      throw_data_corrupt("shard " + out.shard + ", member #" + std::to_string(fr.member_index) +
                         " (" + ref.key + "." + fr.ext + "), byte offset " +
                         std::to_string(fr.header_offset) +
                         ": member data is cut short (the shard shrank after it was indexed)");
    }
    out.fields.emplace_back(fr.ext, std::move(bytes));
  }
  return out;
}

}  // namespace hpct::data
