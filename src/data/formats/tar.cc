#include "data/formats/tar.h"

#include <algorithm>
#include <cctype>
#include <cstring>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include "core/error.h"

namespace hpct::data {
namespace {

std::uint64_t round_up(std::uint64_t n) { return (n + kTarBlock - 1) / kTarBlock * kTarBlock; }

// A NUL- or length-terminated field.
std::string field(const char* p, size_t n) { return std::string(p, strnlen(p, n)); }

// A header's name field, with the ustar prefix in front (GNU's "ustar  "
// has no prefix field).
std::string header_name(const char* h) {
  std::string name = field(h, 100);
  const bool ustar = field(h + 257, 6).rfind("ustar", 0) == 0;
  const bool gnu = std::memcmp(h + 257, "ustar  ", 8) == 0;
  if (ustar && !gnu) {
    std::string prefix = field(h + 345, 155);
    if (!prefix.empty()) name = prefix + "/" + name;
  }
  return name;
}

// Octal (with optional spaces/NULs), or base-256 when the top bit is set
// (GNU, for sizes of 8 GiB and more). nullopt when malformed.
std::optional<std::uint64_t> parse_number(const char* p, size_t n) {
  const auto* u = reinterpret_cast<const unsigned char*>(p);
  if (u[0] & 0x80) {
    std::uint64_t v = u[0] & 0x7f;
    for (size_t i = 1; i < n; ++i) {
      if (v >> 56) return std::nullopt;
      v = (v << 8) | u[i];
    }
    return v;
  }
  size_t i = 0;
  while (i < n && (p[i] == ' ' || p[i] == '\0')) ++i;
  std::uint64_t v = 0;
  bool any = false;
  for (; i < n && p[i] >= '0' && p[i] <= '7'; ++i) {
    v = v * 8 + static_cast<std::uint64_t>(p[i] - '0');
    any = true;
  }
  for (; i < n; ++i) {
    if (p[i] != ' ' && p[i] != '\0') return std::nullopt;
  }
  if (!any) return 0;
  return v;
}

bool all_zero(const char* p, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    if (p[i] != 0) return false;
  }
  return true;
}

// A header's checksums: its bytes summed with the checksum field (148-155)
// read as spaces, as unsigned and as signed chars (old writers summed the
// latter). The walk of a shard of small members spends much of its time
// here (perf, 2026-11-27: most of TarScanner::next), so the unsigned sum
// is SSE2's sum of absolute differences against zero (8 bytes to one lane
// per instruction), and the signed one, needed only when the unsigned one
// does not match, is derived from it: each byte of 128 or more counts 256
// less.
std::int64_t header_sum_unsigned(const char* h) {
  std::uint64_t u = 0;
#if defined(__SSE2__)
  __m128i acc = _mm_setzero_si128();
  const __m128i zero = _mm_setzero_si128();
  for (size_t i = 0; i < kTarBlock; i += 16) {
    const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(h + i));
    acc = _mm_add_epi64(acc, _mm_sad_epu8(v, zero));
  }
  u = static_cast<std::uint64_t>(_mm_cvtsi128_si64(acc)) +
      static_cast<std::uint64_t>(_mm_cvtsi128_si64(_mm_unpackhi_epi64(acc, acc)));
#else
  for (size_t i = 0; i < kTarBlock; ++i) u += static_cast<unsigned char>(h[i]);
#endif
  for (size_t i = 148; i < 156; ++i) u -= static_cast<unsigned char>(h[i]);
  return static_cast<std::int64_t>(u) + 8 * ' ';
}

std::int64_t header_sum_signed(const char* h) {
  std::int64_t high = 0;  // bytes of 128 or more outside the checksum field
  for (size_t i = 0; i < kTarBlock; ++i) {
    if (i < 148 || i >= 156) high += static_cast<unsigned char>(h[i]) >> 7;
  }
  return header_sum_unsigned(h) - 256 * high;
}

std::string printable(const std::string& s) {
  std::string out;
  for (char c : s) out.push_back(c >= 32 && c < 127 ? c : '?');
  return out;
}

// pax extended header records: "<len> <key>=<value>\n".
void parse_pax(const std::string& data, std::string* path, bool* has_size, std::uint64_t* size) {
  size_t pos = 0;
  while (pos < data.size()) {
    size_t sp = data.find(' ', pos);
    if (sp == std::string::npos) return;
    size_t len = std::strtoull(data.c_str() + pos, nullptr, 10);
    if (len == 0 || pos + len > data.size()) return;
    std::string rec = data.substr(sp + 1, pos + len - sp - 2);  // drops the '\n'
    size_t eq = rec.find('=');
    if (eq != std::string::npos) {
      std::string key = rec.substr(0, eq);
      if (key == "path") *path = rec.substr(eq + 1);
      if (key == "size") {
        *size = std::strtoull(rec.c_str() + eq + 1, nullptr, 10);
        *has_size = true;
      }
    }
    pos += len;
  }
}

void put_octal(char* p, size_t n, std::uint64_t v) {
  // n-1 digits and a NUL, as ustar wants.
  for (size_t i = n - 1; i-- > 0;) {
    p[i] = static_cast<char>('0' + (v & 7));
    v >>= 3;
  }
  p[n - 1] = '\0';
}

}  // namespace

TarScanner::TarScanner(const RandomAccessFile& file) : file_(file) {}
TarScanner::TarScanner(const RandomAccessFile& file, std::uint64_t offset, std::uint64_t next_index)
    : file_(file), offset_(offset), index_(next_index) {}

void TarScanner::fail(const std::string& what, std::uint64_t at, const std::string& member) {
  std::string m = "shard " + file_.name() + ", member #" + std::to_string(index_);
  if (!member.empty()) m += " (" + printable(member) + ")";
  m += ", byte offset " + std::to_string(at) + ": " + what;
  failed_ = true;
  throw_data_corrupt(m);
}

std::optional<TarMember> TarScanner::next() {
  if (failed_) throw_data_corrupt("shard " + file_.name() + ": scan already failed");
  std::string long_name;
  bool has_pax_size = false;
  std::uint64_t pax_size = 0;
  std::uint64_t first_header = offset_;
  char copy[kTarBlock];
  while (true) {
    const std::uint64_t at = offset_;
    // In place when the file's bytes are in memory, else a copy.
    const char* h = file_.view(at, kTarBlock);
    if (h == nullptr) {
      size_t n = file_.read_at(at, copy, kTarBlock);
      if (n == 0) fail("archive ends without its end-of-archive marker (truncated tar)", at, "");
      if (n < kTarBlock) fail("archive ends inside a header block (truncated tar)", at, "");
      h = copy;
    }
    if (all_zero(h, kTarBlock)) {
      // One zero block then the end of the file is accepted (some writers
      // omit the second); anything else after it is not our business.
      if (!long_name.empty() || has_pax_size) fail("end-of-archive marker after a long-name header", at, long_name);
      offset_ = file_.size();
      return std::nullopt;
    }
    std::string name = header_name(h);
    // Checksum: the header's bytes with the checksum field read as spaces.
    // Old writers summed signed chars; accept either.
    auto stored = parse_number(h + 148, 8);
    const std::int64_t sum_unsigned = header_sum_unsigned(h);
    if (!stored || (static_cast<std::int64_t>(*stored) != sum_unsigned &&
                    static_cast<std::int64_t>(*stored) != header_sum_signed(h))) {
      fail("header checksum does not match (stored " + field(h + 148, 8) + ", computed " +
               std::to_string(sum_unsigned) + ")",
           at, long_name.empty() ? name : long_name);
    }
    auto size = parse_number(h + 124, 12);
    if (!size) fail("malformed size field in the header", at, name);
    const char type = h[156];
    const std::uint64_t data_at = at + kTarBlock;
    const std::uint64_t data_size = (type == '0' || type == '\0' || type == '7') && has_pax_size ? pax_size : *size;
    if (data_at + data_size > file_.size()) {
      fail("member data of " + std::to_string(data_size) + " bytes at byte offset " +
               std::to_string(data_at) + " is cut short by the end of the file at " +
               std::to_string(file_.size()),
           at, long_name.empty() ? name : long_name);
    }
    offset_ = data_at + round_up(data_size);
    if (type == 'L' || type == 'x') {
      if (data_size > (1u << 20)) fail("long-name or pax header over 1 MiB", at, name);
      std::string data(data_size, '\0');
      file_.read_at(data_at, data.data(), data.size());
      if (type == 'L') {
        long_name = field(data.data(), data.size());
      } else {
        std::string path;
        parse_pax(data, &path, &has_pax_size, &pax_size);
        if (!path.empty()) long_name = path;
      }
      continue;
    }
    if (type == 'g' || type == 'K') continue;  // global pax, GNU long link name
    if (type != '0' && type != '\0' && type != '7') {
      long_name.clear();
      has_pax_size = false;
      first_header = offset_;
      continue;  // directories, links, devices: not sample data
    }
    TarMember m;
    m.name = long_name.empty() ? name : long_name;
    m.index = index_++;
    m.header_offset = first_header;
    m.data_offset = data_at;
    m.size = data_size;
    return m;
  }
}

std::string read_member(const RandomAccessFile& file, const TarMember& m) {
  std::string data;
  if (!file.read_string(m.data_offset, m.size, &data)) {
    throw_data_corrupt("shard " + file.name() + ", member #" + std::to_string(m.index) + " (" +
                       printable(m.name) + "), byte offset " + std::to_string(m.header_offset) +
                       ": member data is cut short by the end of the file");
  }
  return data;
}

bool tar_header_matches(const char* block, const std::string& name, std::uint64_t size) {
  if (parse_number(block + 124, 12) != size) return false;
  if (name.size() > 100) return true;  // a pax record holds the name; the block has a cut copy
  // Extensions reach the index lower-cased (sample.h), so case is not compared.
  const std::string got = header_name(block);
  return got.size() == name.size() &&
         std::equal(got.begin(), got.end(), name.begin(), [](char a, char b) {
           return std::tolower(static_cast<unsigned char>(a)) == std::tolower(static_cast<unsigned char>(b));
         });
}

std::string tar_header(const std::string& name, std::uint64_t size, char type, std::uint64_t mtime) {
  std::string h(kTarBlock, '\0');
  std::memcpy(h.data(), name.data(), std::min<size_t>(name.size(), 100));
  put_octal(&h[100], 8, type == '5' ? 0755 : 0644);
  put_octal(&h[108], 8, 0);
  put_octal(&h[116], 8, 0);
  put_octal(&h[124], 12, size);
  put_octal(&h[136], 12, mtime);
  h[156] = type;
  std::memcpy(&h[257], "ustar", 6);  // "ustar\0"
  std::memcpy(&h[263], "00", 2);
  std::memset(&h[148], ' ', 8);
  unsigned sum = 0;
  for (unsigned char c : h) sum += c;
  put_octal(&h[148], 7, sum);  // 6 digits, NUL, then the space kept from above
  h[155] = ' ';
  return h;
}

TarWriter::TarWriter(WritableFile& out, std::uint64_t mtime) : out_(out), mtime_(mtime) {}

std::uint64_t TarWriter::member_bytes(const std::string& name, size_t data_size) {
  std::uint64_t n = kTarBlock + round_up(data_size);
  if (name.size() > 100) {
    // a pax header block plus its records (record lengths are small)
    n += kTarBlock + round_up(name.size() + 32);
  }
  return n;
}

void TarWriter::write_header(const std::string& name, std::uint64_t size, char type) {
  std::string h = tar_header(name, size, type, mtime_);
  out_.append(h);
  bytes_ += h.size();
}

void TarWriter::add(const std::string& name, std::string_view data) {
  if (name.size() > 100) {
    // pax record "<len> path=<name>\n", where len counts its own digits.
    std::string body = " path=" + name + "\n";
    size_t len = body.size() + 1;
    while (std::to_string(len).size() + body.size() != len) ++len;
    std::string rec = std::to_string(len) + body;
    write_header("PaxHeaders/" + name.substr(name.size() - 80), rec.size(), 'x');
    rec.resize(round_up(rec.size()), '\0');
    out_.append(rec);
    bytes_ += rec.size();
  }
  write_header(name.size() > 100 ? name.substr(0, 100) : name, data.size(), '0');
  out_.append(data);
  std::string pad(round_up(data.size()) - data.size(), '\0');
  out_.append(pad);
  bytes_ += data.size() + pad.size();
}

void TarWriter::finish() {
  std::string end(2 * kTarBlock, '\0');
  out_.append(end);
  bytes_ += end.size();
}

}  // namespace hpct::data
