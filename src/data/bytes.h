// Big-endian integers and length-prefixed strings, for the data server's
// messages and the loader's saved state. A reader that runs out of bytes
// raises DataCorrupt naming what it was reading.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace hpct::data {

class ByteWriter {
 public:
  void u8(std::uint8_t v) { out_.push_back(static_cast<char>(v)); }
  void u32(std::uint32_t v) { put(v, 4); }
  void u64(std::uint64_t v) { put(v, 8); }
  void i64(std::int64_t v) { put(static_cast<std::uint64_t>(v), 8); }
  void str(std::string_view s) {
    u32(static_cast<std::uint32_t>(s.size()));
    out_.append(s);
  }
  void raw(std::string_view s) { out_.append(s); }
  std::string& bytes() { return out_; }
  std::string take() { return std::move(out_); }

 private:
  void put(std::uint64_t v, int n) {
    for (int i = n - 1; i >= 0; --i) out_.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
  }
  std::string out_;
};

// Borrows the bytes; not thread-safe.
class ByteReader {
 public:
  ByteReader(std::string_view bytes, std::string what) : b_(bytes), what_(std::move(what)) {}
  std::uint8_t u8() { return static_cast<std::uint8_t>(get(1)); }
  std::uint32_t u32() { return static_cast<std::uint32_t>(get(4)); }
  std::uint64_t u64() { return get(8); }
  std::int64_t i64() { return static_cast<std::int64_t>(get(8)); }
  std::string str() {
    std::uint32_t n = u32();
    return std::string(raw(n));
  }
  std::string_view raw(size_t n);
  bool done() const { return pos_ == b_.size(); }
  // DataCorrupt unless every byte was read.
  void expect_done() const;

 private:
  std::uint64_t get(int n);
  std::string_view b_;
  size_t pos_ = 0;
  std::string what_;
};

}  // namespace hpct::data
