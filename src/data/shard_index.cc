#include "data/shard_index.h"

#include "core/error.h"
#include "data/random.h"
#include "data/formats/tar.h"
#include "data/formats/tfrecord.h"

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

// Appends a tar shard's samples; returns how many. With kSkip, damage ends
// the shard: the sample being read when it hit is lost, and so is the rest,
// whose member boundaries can no longer be trusted.
std::uint64_t index_tar_file(const RandomAccessFile& file, std::uint32_t shard, OnError on_error,
                             const Logger& log, std::vector<SampleRef>* samples, ShardIndexStats* stats) {
  std::uint64_t count = 0;
  TarScanner scan(file);
  SampleRef cur;
  bool open = false;
  try {
    while (auto m = scan.next()) {
      std::string key, ext;
      split_member_name(m->name, &key, &ext);
      if (open && key != cur.key) {
        samples->push_back(std::move(cur));
        ++count;
        cur = SampleRef();
        open = false;
      }
      if (!open) {
        cur.key = key;
        cur.shard = shard;
        open = true;
      }
      cur.fields.push_back({ext, m->index, m->header_offset, m->data_offset, m->size});
    }
    if (open) {
      samples->push_back(std::move(cur));
      ++count;
    }
  } catch (const Error& e) {
    if (on_error == OnError::kFail) throw;
    ++stats->skipped_samples;
    ++stats->damaged_shards;
    if (stats->errors.size() < kMaxErrorsKept) stats->errors.push_back(e.what());
    log.warn("data", std::string("skipping the rest of a damaged shard: ") + e.what());
  }
  return count;
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

std::shared_ptr<const ShardIndex> ShardIndex::build(const std::vector<std::string>& shards,
                                                    std::shared_ptr<FileSystem> fs,
                                                    OnError on_error, const Logger& log) {
  auto index = std::make_shared<ShardIndex>();
  index->shards_ = shards;
  fs->will_read(shards);  // a remote file system starts downloading ahead of the walk
  std::uint64_t h = 0x48504354ull;
  for (size_t s = 0; s < shards.size(); ++s) {
    const auto shard = static_cast<std::uint32_t>(s);
    std::uint64_t count = 0;
    std::unique_ptr<RandomAccessFile> file;
    index->tfrecord_.push_back(is_tfrecord_path(shards[s]));
    try {
      file = fs->open_read(shards[s]);
      if (index->tfrecord_.back()) {
        count = index_tfrecord_file(*file, shard, shards[s], on_error, log, &index->samples_,
                                    &index->stats_);
      } else {
        count = index_tar_file(*file, shard, on_error, log, &index->samples_, &index->stats_);
      }
    } catch (const Error& e) {
      if (on_error == OnError::kFail) throw;
      if (e.code() != ErrorCode::kIo) throw;
      ++index->stats_.damaged_shards;
      if (index->stats_.errors.size() < kMaxErrorsKept) index->stats_.errors.push_back(e.what());
      log.warn("data", std::string("skipping a shard that cannot be read: ") + e.what());
      file.reset();
    }
    index->files_.push_back(std::move(file));
    index->shard_samples_.push_back(count);
    h = hash_string(h, shards[s]);
    h = Rng::mix(h ^ count);
  }
  index->fingerprint_ = h;
  return index;
}

RawSample ShardIndex::read(std::uint64_t id) const {
  const SampleRef& ref = samples_.at(id);
  const RandomAccessFile& f = *files_[ref.shard];
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
    std::string bytes(fr.size, '\0');
    if (f.read_at(fr.data_offset, bytes.data(), bytes.size()) != fr.size) {
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
