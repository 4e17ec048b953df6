// TFRecord files, so datasets written by TensorFlow can be read.
//
// A record is: length (8, little-endian) | masked CRC-32C of the length (4)
// | data (length) | masked CRC-32C of the data (4). Every CRC is checked; a
// mismatch or a file cut short is DataCorrupt naming the file, the record
// number and its byte offset.
//
// Damage comes in two kinds, and the error policy treats them differently:
// - the data CRC fails but the length's CRC is good: the framing holds, so
//   the next record is still found; with skip only this record is lost;
// - the length's CRC fails, the length is absurd, or the file ends inside a
//   record: nothing after it can be framed, so the file ends there; with
//   skip the reader stops reading that file, warns and counts it.
// With fail (the default) both are DataCorrupt.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/error.h"
#include "core/log.h"
#include "data/source/file.h"
#include "data/sample.h"

namespace hpct::data {

// Whether a path names a TFRecord file: it ends in .tfrecord, .tfrecords or
// .tfr, or has TensorFlow Datasets' sharded form "x.tfrecord-00003-of-00016".
bool is_tfrecord_path(const std::string& path);

struct TfRecord {
  std::uint64_t offset = 0;  // byte offset of the record's length field
  std::string data;
};

// Where a record lies, found from its header alone (the data is not read).
struct TfRecordFrame {
  std::uint64_t number = 0;  // records before it in the file
  std::uint64_t offset = 0;  // byte offset of the length field
  std::uint64_t length = 0;  // data bytes; the data starts at offset + 12
};

struct TfRecordReaderStats {
  std::uint64_t skipped_records = 0;  // data CRC failures passed over (skip)
  bool stopped_early = false;         // framing lost: the rest of the file is unread (skip)
  std::vector<std::string> errors;    // the first few damage reports
};

// Reads records in order. Not thread-safe; borrows the file (must outlive).
class TfRecordReader {
 public:
  // max_record_bytes bounds what one length field may make us allocate.
  // on_error: see the file comment; warnings go to log.
  explicit TfRecordReader(const RandomAccessFile& file, OnError on_error = OnError::kFail,
                          const Logger& log = Logger(),
                          std::uint64_t max_record_bytes = 1ull << 30);

  // The next record, or nullopt at the end of the file (or, with skip, where
  // the framing was lost). DataCorrupt as above with fail.
  std::optional<TfRecord> next();
  // The next record's frame without reading its data (so a data CRC failure
  // is not seen here; read_tfrecord_data finds it). Framing damage as next().
  std::optional<TfRecordFrame> next_frame();

  std::uint64_t offset() const { return offset_; }
  std::uint64_t records_read() const { return count_; }
  const TfRecordReaderStats& stats() const { return stats_; }

 private:
  // A frame, or nullopt at a clean end; DataCorrupt on framing damage.
  std::optional<TfRecordFrame> frame_or_throw();
  void note_damage(const Error& e, const char* consequence);

  const RandomAccessFile& file_;
  OnError on_error_;
  Logger log_;
  std::uint64_t max_record_bytes_;
  std::uint64_t offset_ = 0;
  std::uint64_t count_ = 0;  // records framed so far (read or skipped)
  TfRecordReaderStats stats_;
};

// A framed record's data, its CRC checked: DataCorrupt naming the file, the
// record number and offset when the CRC fails or the file shrank. Thread-safe
// (pread). Used by the sample index to read records in any order.
std::string read_tfrecord_data(const RandomAccessFile& file, const TfRecordFrame& frame);

// The bytes of one record, as TensorFlow's TFRecordWriter writes it.
std::string encode_tfrecord(std::string_view data);

}  // namespace hpct::data
