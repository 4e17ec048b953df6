#include "data/formats/shard_toc.h"

#include <cstring>
#include <sstream>

#include "core/error.h"
#include "data/formats/tfrecord.h"

namespace hpct::data {
namespace {

constexpr const char* kMagic = "hpctrain-shard-index";

bool parse_u64(std::string_view s, std::uint64_t* out) {
  if (s.empty() || s.size() > 20) return false;
  std::uint64_t v = 0;
  for (char c : s) {
    if (c < '0' || c > '9') return false;
    const std::uint64_t d = static_cast<std::uint64_t>(c - '0');
    if (v > (UINT64_MAX - d) / 10) return false;
    v = v * 10 + d;
  }
  *out = v;
  return true;
}

// Splits off the next space-separated word of *s.
std::string_view next_word(std::string_view* s) {
  const size_t b = s->find_first_not_of(' ');
  if (b == std::string_view::npos) {
    *s = {};
    return {};
  }
  const size_t e = s->find(' ', b);
  std::string_view w = s->substr(b, e == std::string_view::npos ? std::string_view::npos : e - b);
  *s = e == std::string_view::npos ? std::string_view() : s->substr(e + 1);
  return w;
}

}  // namespace

std::string toc_path(const std::string& shard) { return shard + kTocSuffix; }

bool is_toc_path(const std::string& path) {
  const size_t n = std::strlen(kTocSuffix);
  return path.size() > n && path.compare(path.size() - n, n, kTocSuffix) == 0;
}

std::string format_toc(const ShardToc& toc) {
  std::ostringstream out;
  out << kMagic << " 1 " << (toc.tfrecord ? "tfrecord" : "tar") << ' ' << toc.shard_bytes << ' '
      << toc.members.size() << '\n';
  for (const auto& m : toc.members) {
    if (toc.tfrecord) {
      out << m.header_offset << ' ' << m.size << '\n';
    } else {
      out << m.header_offset << ' ' << m.data_offset << ' ' << m.size << ' ' << m.name << '\n';
    }
  }
  return out.str();
}

ShardToc parse_toc(std::string_view text, const std::string& where) {
  ShardToc toc;
  size_t line_no = 0;
  auto bad = [&](const std::string& what) {
    throw_data_corrupt(where + ", line " + std::to_string(line_no) + ": " + what +
                       ": not a shard index hpctrain can read; remake it with `hpctrain data index "
                       "SHARDS` (or delete it: the shard is then indexed by reading it)");
  };
  std::uint64_t expected = 0;
  size_t pos = 0;
  bool header = true;
  while (pos < text.size()) {
    size_t nl = text.find('\n', pos);
    if (nl == std::string_view::npos) nl = text.size();
    std::string_view line = text.substr(pos, nl - pos);
    pos = nl + 1;
    ++line_no;
    if (header) {
      if (next_word(&line) != kMagic) bad("the first line does not start with '" + std::string(kMagic) + "'");
      if (next_word(&line) != "1") bad("unknown version");
      const std::string_view kind = next_word(&line);
      if (kind != "tar" && kind != "tfrecord") bad("unknown shard kind '" + std::string(kind) + "'");
      toc.tfrecord = kind == "tfrecord";
      if (!parse_u64(next_word(&line), &toc.shard_bytes) || !parse_u64(next_word(&line), &expected)) {
        bad("expected the shard's size and its member count");
      }
      toc.members.reserve(static_cast<size_t>(std::min<std::uint64_t>(expected, 1u << 24)));
      header = false;
      continue;
    }
    TarMember m;
    m.index = toc.members.size();
    if (toc.tfrecord) {
      if (!parse_u64(next_word(&line), &m.header_offset) || !parse_u64(next_word(&line), &m.size) ||
          !line.empty()) {
        bad("expected '<offset> <length>'");
      }
      m.data_offset = m.header_offset + 12;
    } else {
      if (!parse_u64(next_word(&line), &m.header_offset) || !parse_u64(next_word(&line), &m.data_offset) ||
          !parse_u64(next_word(&line), &m.size) || line.empty()) {
        bad("expected '<header offset> <data offset> <size> <name>'");
      }
      if (m.data_offset < m.header_offset + kTarBlock) bad("the data starts inside its header");
      m.name = std::string(line);
    }
    if (m.data_offset + m.size > toc.shard_bytes) bad("the member ends past the shard's end");
    toc.members.push_back(std::move(m));
  }
  if (header) bad("the file is empty");
  if (toc.members.size() != expected) {
    bad("it lists " + std::to_string(toc.members.size()) + " members, its first line says " +
        std::to_string(expected) + " (cut short?)");
  }
  return toc;
}

ShardToc make_toc(const RandomAccessFile& file, bool tfrecord) {
  ShardToc toc;
  toc.tfrecord = tfrecord;
  toc.shard_bytes = file.size();
  if (tfrecord) {
    TfRecordReader reader(file, OnError::kFail);
    while (auto frame = reader.next_frame()) {
      TarMember m;
      m.index = frame->number;
      m.header_offset = frame->offset;
      m.data_offset = frame->offset + 12;
      m.size = frame->length;
      toc.members.push_back(m);
    }
    return toc;
  }
  TarScanner scan(file);
  while (auto m = scan.next()) {
    if (m->name.find('\n') != std::string::npos) {
      throw_invalid_argument(file.name() + ": member '" + m->name +
                             "' has a line break in its name, which a sidecar index cannot hold");
    }
    toc.members.push_back(std::move(*m));
  }
  return toc;
}

}  // namespace hpct::data
