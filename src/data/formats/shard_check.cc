#include "data/formats/shard_check.h"

#include <algorithm>

#include "core/error.h"
#include "data/formats/example.h"
#include "data/decode/fields.h"
#include "data/decode/image.h"
#include "data/sample.h"
#include "data/formats/tar.h"
#include "data/formats/tfrecord.h"

namespace hpct::data {
namespace {

void add(FieldSummary* f, std::uint64_t bytes) {
  f->min_bytes = f->count == 0 ? bytes : std::min(f->min_bytes, bytes);
  f->max_bytes = std::max(f->max_bytes, bytes);
  ++f->count;
  f->bytes += bytes;
}

// Every record's CRCs, and its Example and image as the Loader would decode
// them (the default feature names). A data CRC failure or a bad Example
// leaves the framing intact, so --all goes on; framing damage ends the file.
std::vector<std::string> verify_tfrecord_file(const RandomAccessFile& file, bool all) {
  std::vector<std::string> failures;
  TfRecordReader reader(file);
  const FieldOptions fields;
  Image scratch;
  // Each pass frames one more record of a file of fixed size, so this ends.
  while (true) {
    std::optional<TfRecordFrame> frame;
    try {
      frame = reader.next_frame();
    } catch (const Error& e) {
      failures.push_back(e.what());
      return failures;
    }
    if (!frame) return failures;
    try {
      RawSample sample;
      sample.shard = file.name();
      sample.member_index = frame->number;
      sample.offset = frame->offset;
      const size_t slash = file.name().rfind('/');
      sample.key = file.name().substr(slash == std::string::npos ? 0 : slash + 1) + "#" +
                   std::to_string(frame->number);
      sample.fields.emplace_back(kTfRecordField, read_tfrecord_data(file, *frame));
      decode_sample_into(sample, fields, &scratch);
    } catch (const Error& e) {
      failures.push_back(e.what());
      if (!all) return failures;
    }
  }
}

}  // namespace

ShardSummary inspect_shard(FileSystem& fs, const std::string& path) {
  auto file = fs.open_read(path);
  ShardSummary s;
  s.path = path;
  s.file_bytes = file->size();
  if (is_tfrecord_path(path)) {
    // Fields are the Examples' features (bytes: the values' total size;
    // int64/float: 8/4 per value), or "record" for a record that is not a
    // tf.train.Example.
    TfRecordReader r(*file);
    while (auto rec = r.next()) {
      ++s.samples;
      ++s.members;
      ExampleFeatures features;
      try {
        features = parse_example(rec->data);
      } catch (const Error&) {
        add(&s.fields["record"], rec->data.size());
        continue;
      }
      for (const auto& [name, f] : features) {
        std::uint64_t bytes = 8 * f.int64s.size() + 4 * f.floats.size();
        for (auto v : f.bytes) bytes += v.size();
        add(&s.fields[name], bytes);
      }
    }
    return s;
  }
  TarScanner scan(*file);
  std::string last_key;
  while (auto m = scan.next()) {
    std::string key, ext;
    split_member_name(m->name, &key, &ext);
    if (s.members == 0 || key != last_key) ++s.samples;
    last_key = key;
    ++s.members;
    add(&s.fields[ext], m->size);
  }
  return s;
}

std::vector<std::string> verify_shard(FileSystem& fs, const std::string& path, bool all) {
  std::vector<std::string> failures;
  std::unique_ptr<RandomAccessFile> file;
  try {
    file = fs.open_read(path);
    if (is_tfrecord_path(path)) return verify_tfrecord_file(*file, all);
    TarScanner scan(*file);
    while (auto m = scan.next()) {
      std::string data = read_member(*file, *m);
      std::string key, ext;
      split_member_name(m->name, &key, &ext);
      const std::string last = ext.substr(ext.rfind('.') == std::string::npos ? 0 : ext.rfind('.') + 1);
      if (last == "png" || last == "jpg" || last == "jpeg") {
        try {
          decode_image(data);
        } catch (const Error& e) {
          failures.push_back("shard " + path + ", member #" + std::to_string(m->index) + " (" + m->name +
                             "), byte offset " + std::to_string(m->header_offset) + ": " + e.what());
          if (!all) return failures;
        }
      }
    }
  } catch (const Error& e) {
    failures.push_back(e.what());
  }
  return failures;
}

}  // namespace hpct::data
