#include "data/shard_check.h"

#include <algorithm>

#include "core/error.h"
#include "data/image.h"
#include "data/sample.h"
#include "data/tar.h"
#include "data/tfrecord.h"

namespace hpct::data {
namespace {

bool is_tfrecord(const std::string& path) {
  const std::string ext = ".tfrecord";
  return path.size() >= ext.size() && path.compare(path.size() - ext.size(), ext.size(), ext) == 0;
}

void add(FieldSummary* f, std::uint64_t bytes) {
  f->min_bytes = f->count == 0 ? bytes : std::min(f->min_bytes, bytes);
  f->max_bytes = std::max(f->max_bytes, bytes);
  ++f->count;
  f->bytes += bytes;
}

}  // namespace

ShardSummary inspect_shard(FileSystem& fs, const std::string& path) {
  auto file = fs.open_read(path);
  ShardSummary s;
  s.path = path;
  s.file_bytes = file->size();
  if (is_tfrecord(path)) {
    TfRecordReader r(*file);
    while (auto rec = r.next()) {
      ++s.samples;
      ++s.members;
      add(&s.fields["record"], rec->data.size());
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
    if (is_tfrecord(path)) {
      TfRecordReader r(*file);
      while (r.next()) {
      }
      return failures;
    }
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
