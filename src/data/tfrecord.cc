#include "data/tfrecord.h"

#include "core/error.h"
#include "data/crc32c.h"

namespace hpct::data {
namespace {

void put_le(std::string* out, std::uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) out->push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}
std::uint64_t get_le(const char* p, int bytes) {
  std::uint64_t v = 0;
  for (int i = bytes - 1; i >= 0; --i) v = (v << 8) | static_cast<unsigned char>(p[i]);
  return v;
}

}  // namespace

TfRecordReader::TfRecordReader(const RandomAccessFile& file, std::uint64_t max_record_bytes)
    : file_(file), max_record_bytes_(max_record_bytes) {}

std::optional<TfRecord> TfRecordReader::next() {
  const std::string where = "TFRecord file " + file_.name() + ", record " + std::to_string(count_) +
                            " at byte offset " + std::to_string(offset_);
  char head[12];
  size_t n = file_.read_at(offset_, head, sizeof head);
  if (n == 0) return std::nullopt;
  if (n < sizeof head) throw_data_corrupt(where + ": file ends inside the record header");
  const std::uint64_t len = get_le(head, 8);
  if (mask_crc(crc32c(head, 8)) != get_le(head + 8, 4)) {
    throw_data_corrupt(where + ": CRC-32C of the length field does not match");
  }
  if (len > max_record_bytes_) {
    throw_data_corrupt(where + ": record length " + std::to_string(len) + " exceeds the limit of " +
                       std::to_string(max_record_bytes_) + " bytes");
  }
  if (offset_ + 12 + len + 4 > file_.size()) {
    throw_data_corrupt(where + ": record of " + std::to_string(len) +
                       " bytes is cut short by the end of the file at " +
                       std::to_string(file_.size()));
  }
  TfRecord r;
  r.offset = offset_;
  r.data.resize(len);
  char tail[4];
  if (file_.read_at(offset_ + 12, r.data.data(), len) != len ||
      file_.read_at(offset_ + 12 + len, tail, 4) != 4) {
    throw_data_corrupt(where + ": file shrank while reading");
  }
  if (mask_crc(crc32c(r.data.data(), r.data.size())) != get_le(tail, 4)) {
    throw_data_corrupt(where + ": CRC-32C of the data does not match (data at byte offset " +
                       std::to_string(offset_ + 12) + ")");
  }
  offset_ += 12 + len + 4;
  ++count_;
  return r;
}

std::string encode_tfrecord(std::string_view data) {
  std::string out;
  out.reserve(data.size() + 16);
  put_le(&out, data.size(), 8);
  put_le(&out, mask_crc(crc32c(out.data(), 8)), 4);
  out.append(data);
  put_le(&out, mask_crc(crc32c(data.data(), data.size())), 4);
  return out;
}

}  // namespace hpct::data
