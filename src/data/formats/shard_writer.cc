#include "data/formats/shard_writer.h"

#include <cctype>
#include <cstdio>

#include "core/error.h"
#include "data/formats/tfrecord.h"

namespace hpct::data {
namespace {

// Exactly one conversion, of the form %[0-9]*d (or %[0-9]*u); %% allowed.
void check_pattern(const std::string& p) {
  int conversions = 0;
  for (size_t i = 0; i < p.size(); ++i) {
    if (p[i] != '%') continue;
    if (i + 1 < p.size() && p[i + 1] == '%') {
      ++i;
      continue;
    }
    size_t j = i + 1;
    while (j < p.size() && std::isdigit(static_cast<unsigned char>(p[j]))) ++j;
    if (j >= p.size() || (p[j] != 'd' && p[j] != 'u')) {
      throw_invalid_argument("shard pattern '" + p + "': only %d-style conversions (e.g. %06d)");
    }
    ++conversions;
    i = j;
  }
  if (conversions != 1) {
    throw_invalid_argument("shard pattern '" + p +
                           "' needs exactly one shard-number conversion, e.g. out/train-%06d.tar");
  }
}

}  // namespace

std::string format_shard_name(const std::string& pattern, std::uint64_t n) {
  check_pattern(pattern);
  // Rewrite the conversion for an unsigned long long argument.
  std::string fmt;
  for (size_t i = 0; i < pattern.size(); ++i) {
    fmt.push_back(pattern[i]);
    if (pattern[i] == '%' && i + 1 < pattern.size() && pattern[i + 1] == '%') {
      fmt.push_back(pattern[++i]);
      continue;
    }
    if (pattern[i] == '%') {
      size_t j = i + 1;
      while (std::isdigit(static_cast<unsigned char>(pattern[j]))) fmt.push_back(pattern[j++]);
      fmt += "llu";
      i = j;
    }
  }
  char buf[4096];
  std::snprintf(buf, sizeof buf, fmt.c_str(), static_cast<unsigned long long>(n));
  return buf;
}

ShardWriter::ShardWriter(ShardWriterOptions options) : options_(std::move(options)) {
  check_pattern(options_.pattern);
  if (options_.max_count < 1) throw_invalid_argument("--max-count must be at least 1");
}

ShardWriter::~ShardWriter() = default;  // an uncommitted shard's temporary is removed

std::uint64_t ShardWriter::shard_bytes() const {
  if (!file_) return 0;
  return tar_ ? tar_->bytes() : record_bytes_;
}

void ShardWriter::make_room(std::uint64_t need) {
  const std::uint64_t trailer = options_.format == ShardFormat::kTar ? 2 * kTarBlock : 0;
  if (file_ && (in_shard_ >= options_.max_count ||
                (in_shard_ > 0 && shard_bytes() + need + trailer > options_.max_size))) {
    finish_shard();
  }
  if (!file_) {
    std::string name = format_shard_name(options_.pattern, shards_.size());
    file_ = options_.fs->open_write(name);
    if (options_.format == ShardFormat::kTar) tar_ = std::make_unique<TarWriter>(*file_);
    record_bytes_ = 0;
    toc_ = ShardToc();
    toc_.tfrecord = options_.format == ShardFormat::kTfRecord;
    shards_.push_back(name);
  }
}

void ShardWriter::write(const std::string& key,
                        const std::vector<std::pair<std::string, std::string>>& fields) {
  if (options_.format != ShardFormat::kTar) {
    throw_invalid_argument("shard writer: " + options_.pattern + " is a TFRecord pattern; write records");
  }
  std::uint64_t need = 0;
  for (const auto& [ext, bytes] : fields) need += TarWriter::member_bytes(key + "." + ext, bytes.size());
  make_room(need);
  for (const auto& [ext, bytes] : fields) {
    TarMember m;
    m.name = key + "." + ext;
    m.index = toc_.members.size();
    m.header_offset = tar_->bytes();
    m.size = bytes.size();
    tar_->add(m.name, bytes);
    m.data_offset = tar_->bytes() - (m.size + kTarBlock - 1) / kTarBlock * kTarBlock;
    if (options_.write_index) toc_.members.push_back(std::move(m));
  }
  ++in_shard_;
  ++samples_;
}

void ShardWriter::write_record(std::string_view data) {
  if (options_.format != ShardFormat::kTfRecord) {
    throw_invalid_argument("shard writer: " + options_.pattern + " is a tar pattern; write samples");
  }
  const std::string record = encode_tfrecord(data);
  make_room(record.size());
  if (options_.write_index) {
    TarMember m;
    m.index = toc_.members.size();
    m.header_offset = record_bytes_;
    m.data_offset = record_bytes_ + 12;
    m.size = data.size();
    toc_.members.push_back(m);
  }
  file_->append(record);
  record_bytes_ += record.size();
  ++in_shard_;
  ++samples_;
}

void ShardWriter::finish_shard() {
  if (tar_) tar_->finish();
  toc_.shard_bytes = shard_bytes();
  bytes_done_ += shard_bytes();
  file_->commit();
  if (options_.write_index) {
    // After the shard: a sidecar never names a shard that does not exist.
    auto idx = options_.fs->open_write(toc_path(shards_.back()));
    idx->append(format_toc(toc_));
    idx->commit();
  }
  toc_ = ShardToc();
  tar_.reset();
  file_.reset();
  record_bytes_ = 0;
  in_shard_ = 0;
}

void ShardWriter::close() {
  if (file_) finish_shard();
}

}  // namespace hpct::data
