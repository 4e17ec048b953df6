#include "data/shard_index.h"

#include "core/error.h"
#include "data/random.h"
#include "data/tar.h"

namespace hpct::data {
namespace {

constexpr size_t kMaxErrorsKept = 20;

std::uint64_t hash_string(std::uint64_t h, const std::string& s) {
  for (unsigned char c : s) h = Rng::mix(h ^ c);
  return Rng::mix(h ^ s.size());
}

}  // namespace

std::shared_ptr<const ShardIndex> ShardIndex::build(const std::vector<std::string>& shards,
                                                    std::shared_ptr<FileSystem> fs,
                                                    OnError on_error, const Logger& log) {
  auto index = std::make_shared<ShardIndex>();
  index->shards_ = shards;
  std::uint64_t h = 0x48504354ull;
  for (size_t s = 0; s < shards.size(); ++s) {
    std::uint64_t count = 0;
    std::unique_ptr<RandomAccessFile> file;
    try {
      file = fs->open_read(shards[s]);
      TarScanner scan(*file);
      SampleRef cur;
      bool open = false;
      try {
        while (auto m = scan.next()) {
          std::string key, ext;
          split_member_name(m->name, &key, &ext);
          if (open && key != cur.key) {
            index->samples_.push_back(std::move(cur));
            ++count;
            cur = SampleRef();
            open = false;
          }
          if (!open) {
            cur.key = key;
            cur.shard = static_cast<std::uint32_t>(s);
            open = true;
          }
          cur.fields.push_back({ext, m->index, m->header_offset, m->data_offset, m->size});
        }
        if (open) {
          index->samples_.push_back(std::move(cur));
          ++count;
        }
      } catch (const Error& e) {
        if (on_error == OnError::kFail) throw;
        // The sample being read is lost; so is the rest of the shard, whose
        // member boundaries can no longer be trusted.
        ++index->stats_.skipped_samples;
        ++index->stats_.damaged_shards;
        if (index->stats_.errors.size() < kMaxErrorsKept) index->stats_.errors.push_back(e.what());
        log.warn("data", std::string("skipping the rest of a damaged shard: ") + e.what());
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
