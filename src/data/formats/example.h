// tf.train.Example, the protobuf TensorFlow datasets keep in TFRecord files,
// read and written by hand (no protobuf library): the subset an image
// classification dataset needs. libprotobuf's generated parser takes 2.4-3.9x
// the time on the same records (example_bench.cc, docs/data.md): it copies
// every bytes field, where this one hands out views into the record.
//
// The messages, from tensorflow/core/example/{example,feature}.proto:
//   Example   { Features features = 1; }
//   Features  { map<string, Feature> feature = 1; }    // entry: key = 1, value = 2
//   Feature   { oneof kind { BytesList bytes_list = 1; FloatList float_list = 2;
//                            Int64List int64_list = 3; } }
//   BytesList { repeated bytes value = 1; }
//   FloatList { repeated float value = 1 [packed = true]; }
//   Int64List { repeated int64 value = 1 [packed = true]; }
//
// The parser follows protobuf's rules where they matter here: unknown fields
// are skipped, packed and unpacked lists are both read, a map key seen twice
// keeps the last value, a message seen twice merges (lists concatenate), and
// the last oneof member set wins. Every length is checked against the bytes
// left before it is used, so a malformed record is DataCorrupt, never a read
// past the buffer; nesting is fixed at five levels (no recursion on input).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

namespace hpct::data {

struct ExampleFeature {
  enum class Kind { kNone, kBytes, kFloat, kInt64 };
  Kind kind = Kind::kNone;              // kNone: a Feature with no list set
  std::vector<std::string_view> bytes;  // views into the parsed record
  std::vector<float> floats;
  std::vector<std::int64_t> int64s;
};

// Feature name -> feature. The bytes views point into the record passed to
// parse_example, which must outlive the result.
using ExampleFeatures = std::map<std::string, ExampleFeature, std::less<>>;

// Parses a serialized tf.train.Example. DataCorrupt (without a location;
// callers add file, record and offset) naming what is malformed and where in
// the record, e.g. "Example byte 17: length 4000 runs past the end (12 left)".
ExampleFeatures parse_example(std::string_view record);

// "bytes", "float", "int64" or "empty", for messages.
const char* feature_kind_name(ExampleFeature::Kind kind);

// Builds a serialized tf.train.Example, features in the order added. Used
// by tests and by `hpctrain data pack --format tfrecord`. Not thread-safe.
class ExampleWriter {
 public:
  void add_bytes(std::string_view name, const std::vector<std::string_view>& values);
  // packed: as TensorFlow writes it; unpacked lists are legal protobuf too.
  void add_int64(std::string_view name, const std::vector<std::int64_t>& values,
                 bool packed = true);
  void add_float(std::string_view name, const std::vector<float>& values);
  // The Example's bytes. The writer is empty afterwards.
  std::string finish();

 private:
  void add_feature(std::string_view name, const std::string& feature);
  std::string features_;  // the Features message body: its map entries
};

}  // namespace hpct::data
