#include "data/bytes.h"

#include "core/error.h"

namespace hpct::data {

std::string_view ByteReader::raw(size_t n) {
  if (n > b_.size() - pos_) {
    throw_data_corrupt(what_ + ": " + std::to_string(b_.size()) + " bytes end at byte " +
                       std::to_string(pos_) + " while " + std::to_string(n) + " more were expected");
  }
  std::string_view out = b_.substr(pos_, n);
  pos_ += n;
  return out;
}

std::uint64_t ByteReader::get(int n) {
  std::string_view s = raw(static_cast<size_t>(n));
  std::uint64_t v = 0;
  for (char c : s) v = (v << 8) | static_cast<unsigned char>(c);
  return v;
}

void ByteReader::expect_done() const {
  if (!done()) {
    throw_data_corrupt(what_ + ": " + std::to_string(b_.size() - pos_) + " unexpected bytes at byte " +
                       std::to_string(pos_));
  }
}

}  // namespace hpct::data
