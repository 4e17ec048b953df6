#include "data/formats/tfrecord.h"

#include <cctype>

#include "core/error.h"
#include "data/formats/crc32c.h"

namespace hpct::data {
namespace {

constexpr std::uint64_t kHeaderBytes = 12;  // length + its CRC
constexpr std::uint64_t kFooterBytes = 4;   // the data's CRC
constexpr size_t kMaxErrorsKept = 20;

void put_le(std::string* out, std::uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) out->push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}
std::uint64_t get_le(const char* p, int bytes) {
  std::uint64_t v = 0;
  for (int i = bytes - 1; i >= 0; --i) v = (v << 8) | static_cast<unsigned char>(p[i]);
  return v;
}

std::string where(const RandomAccessFile& file, std::uint64_t number, std::uint64_t offset) {
  return "TFRecord file " + file.name() + ", record " + std::to_string(number) +
         " at byte offset " + std::to_string(offset);
}

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// "-00003-of-00016" exactly.
bool is_shard_suffix(const std::string& s) {
  size_t i = 0;
  auto digits = [&] {
    const size_t start = i;
    while (i < s.size() && std::isdigit(static_cast<unsigned char>(s[i]))) ++i;
    return i > start;
  };
  if (i >= s.size() || s[i++] != '-' || !digits()) return false;
  if (s.compare(i, 4, "-of-") != 0) return false;
  i += 4;
  return digits() && i == s.size();
}

}  // namespace

bool is_tfrecord_path(const std::string& path) {
  if (ends_with(path, ".tfrecord") || ends_with(path, ".tfrecords") || ends_with(path, ".tfr"))
    return true;
  const size_t slash = path.rfind('/');
  const size_t at = path.rfind(".tfrecord-");
  return at != std::string::npos && (slash == std::string::npos || at > slash) &&
         is_shard_suffix(path.substr(at + 9));
}

TfRecordReader::TfRecordReader(const RandomAccessFile& file, OnError on_error, const Logger& log,
                               std::uint64_t max_record_bytes)
    : file_(file), on_error_(on_error), log_(log), max_record_bytes_(max_record_bytes) {}

std::optional<TfRecordFrame> TfRecordReader::frame_or_throw() {
  const std::string here = where(file_, count_, offset_);
  char head[kHeaderBytes];
  const size_t n = file_.read_at(offset_, head, sizeof head);
  if (n == 0) return std::nullopt;
  if (n < sizeof head) throw_data_corrupt(here + ": file ends inside the record header");
  const std::uint64_t len = get_le(head, 8);
  if (mask_crc(crc32c(head, 8)) != get_le(head + 8, 4)) {
    throw_data_corrupt(here + ": CRC-32C of the length field does not match");
  }
  if (len > max_record_bytes_) {
    throw_data_corrupt(here + ": record length " + std::to_string(len) + " exceeds the limit of " +
                       std::to_string(max_record_bytes_) + " bytes");
  }
  if (offset_ + kHeaderBytes + len + kFooterBytes > file_.size()) {
    throw_data_corrupt(here + ": record of " + std::to_string(len) +
                       " bytes is cut short by the end of the file at " +
                       std::to_string(file_.size()));
  }
  TfRecordFrame f{count_, offset_, len};
  offset_ += kHeaderBytes + len + kFooterBytes;
  ++count_;
  return f;
}

void TfRecordReader::note_damage(const Error& e, const char* consequence) {
  if (stats_.errors.size() < kMaxErrorsKept) stats_.errors.push_back(e.what());
  log_.warn("data", std::string(consequence) + ": " + e.what());
}

std::optional<TfRecordFrame> TfRecordReader::next_frame() {
  if (stats_.stopped_early) return std::nullopt;
  try {
    return frame_or_throw();
  } catch (const Error& e) {
    if (on_error_ == OnError::kFail || e.code() != ErrorCode::kDataCorrupt) throw;
    stats_.stopped_early = true;
    note_damage(e, "skipping the rest of a TFRecord file whose framing is lost");
    return std::nullopt;
  }
}

std::optional<TfRecord> TfRecordReader::next() {
  // Each pass frames one more record, and framing moves forward through a
  // file of fixed size, so this ends.
  while (auto frame = next_frame()) {
    try {
      return TfRecord{frame->offset, read_tfrecord_data(file_, *frame)};
    } catch (const Error& e) {
      if (on_error_ == OnError::kFail || e.code() != ErrorCode::kDataCorrupt) throw;
      ++stats_.skipped_records;
      note_damage(e, "skipping a TFRecord record");
    }
  }
  return std::nullopt;
}

std::string read_tfrecord_data(const RandomAccessFile& file, const TfRecordFrame& frame) {
  std::string data(frame.length, '\0');
  char tail[kFooterBytes];
  const std::uint64_t data_offset = frame.offset + kHeaderBytes;
  if (file.read_at(data_offset, data.data(), data.size()) != data.size() ||
      file.read_at(data_offset + frame.length, tail, sizeof tail) != sizeof tail) {
    throw_data_corrupt(where(file, frame.number, frame.offset) +
                       ": file is cut short (it shrank after it was indexed)");
  }
  if (mask_crc(crc32c(data.data(), data.size())) != get_le(tail, 4)) {
    throw_data_corrupt(where(file, frame.number, frame.offset) +
                       ": CRC-32C of the data does not match (data at byte offset " +
                       std::to_string(data_offset) + ")");
  }
  return data;
}

std::string encode_tfrecord(std::string_view data) {
  std::string out;
  out.reserve(data.size() + kHeaderBytes + kFooterBytes);
  put_le(&out, data.size(), 8);
  put_le(&out, mask_crc(crc32c(out.data(), 8)), 4);
  out.append(data);
  put_le(&out, mask_crc(crc32c(data.data(), data.size())), 4);
  return out;
}

}  // namespace hpct::data
