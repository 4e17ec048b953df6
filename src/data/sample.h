// Samples: the WebDataset convention for what a sample is inside a tar, and
// the forms a sample takes between the shard and the batch.
//
// A sample is the run of consecutive tar members sharing a key, the member
// path up to the first dot of its file name ("train/000017.png" and
// "train/000017.cls" are sample "train/000017", fields "png" and "cls").
// Extensions are compared lower-case, as WebDataset does.
//
// A TFRecord record is a sample too (shard_index.h): its one field,
// kTfRecordField, holds the record's data, a tf.train.Example.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace hpct::data {

// "dir/abc.seg.png" -> key "dir/abc", ext "seg.png".
void split_member_name(const std::string& name, std::string* key, std::string* ext);

// The field of a TFRecord sample that holds the record's data.
constexpr const char* kTfRecordField = "tfrecord";

enum class OnError { kFail, kSkip };
// "fail" | "skip"; InvalidArgument otherwise.
OnError parse_on_error(const std::string& s);

// Where one field's bytes lie in a shard.
struct FieldRef {
  std::string ext;
  std::uint64_t member_index = 0;   // member number in the tar
  std::uint64_t header_offset = 0;  // byte offset of the member's header
  std::uint64_t data_offset = 0;
  std::uint64_t size = 0;
};

// Where one sample lies: its shard (an index into the shard list) and fields.
struct SampleRef {
  std::string key;
  std::uint32_t shard = 0;
  std::vector<FieldRef> fields;
};

// An 8-bit image, rows of pixels with interleaved channels (HWC).
struct Image {
  int height = 0;
  int width = 0;
  int channels = 0;
  std::vector<std::uint8_t> pixels;  // height * width * channels
};

// A sample's bytes, read from a shard or received from a data server.
struct RawSample {
  std::uint64_t id = 0;       // global sample id (see sampler.h)
  std::string key;
  std::string shard;          // shard path, for messages
  std::uint64_t member_index = 0;  // TFRecord: the record number
  std::uint64_t offset = 0;   // byte offset of its first member's header (or its record)
  std::vector<std::pair<std::string, std::string>> fields;  // ext, bytes
  // Set when a data server decoded it (serve --decode): image and label
  // replace fields, or error says why it did not decode.
  bool decoded = false;
  Image image;
  std::int64_t label = -1;
  std::string error;

  // "shard S, member #M (sample K), byte offset O", as errors name a sample
  // ("TFRecord file S, record M (sample K), byte offset O" for a record).
  std::string where() const;
};

}  // namespace hpct::data
