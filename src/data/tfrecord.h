// TFRecord files, so datasets written by TensorFlow can be read.
//
// A record is: length (8, little-endian) | masked CRC-32C of the length (4)
// | data (length) | masked CRC-32C of the data (4). Every CRC is checked; a
// mismatch or a file cut short is DataCorrupt naming the file, the record
// number and its byte offset.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "data/file.h"

namespace hpct::data {

struct TfRecord {
  std::uint64_t offset = 0;  // byte offset of the record's length field
  std::string data;
};

// Reads records in order. Not thread-safe; borrows the file (must outlive).
class TfRecordReader {
 public:
  // max_record_bytes bounds what one length field may make us allocate.
  explicit TfRecordReader(const RandomAccessFile& file, std::uint64_t max_record_bytes = 1ull << 30);
  // The next record, or nullopt at a clean end of file. DataCorrupt as above.
  std::optional<TfRecord> next();
  std::uint64_t offset() const { return offset_; }
  std::uint64_t records_read() const { return count_; }

 private:
  const RandomAccessFile& file_;
  std::uint64_t max_record_bytes_;
  std::uint64_t offset_ = 0;
  std::uint64_t count_ = 0;
};

// The bytes of one record, as TensorFlow's TFRecordWriter writes it.
std::string encode_tfrecord(std::string_view data);

}  // namespace hpct::data
