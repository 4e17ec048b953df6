#include "data/decode/png_fast.h"

#include <libdeflate.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <vector>

namespace hpct::data {
namespace {

// Larger images gain nothing measurable here (their cost is pixels, not
// set-up) and go to libpng, whose limits then apply.
constexpr std::uint64_t kMaxFilteredBytes = 64u << 20;
constexpr std::uint32_t kMaxSide = 1000000;  // libpng's default user limit

std::uint32_t be32(const unsigned char* p) {
  return static_cast<std::uint32_t>(p[0]) << 24 | static_cast<std::uint32_t>(p[1]) << 16 |
         static_cast<std::uint32_t>(p[2]) << 8 | static_cast<std::uint32_t>(p[3]);
}

bool is_type(const unsigned char* type, const char* name) { return std::memcmp(type, name, 4) == 0; }

// Chunks that leave 8-bit gray or RGB pixels as stored. sRGB is fine: the
// simplified API's 8-bit output is sRGB already, so libpng converts nothing.
bool harmless(const unsigned char* type) {
  for (const char* name : {"sRGB", "pHYs", "tEXt", "zTXt", "iTXt", "tIME"}) {
    if (is_type(type, name)) return true;
  }
  return false;
}

struct Scratch {
  std::unique_ptr<libdeflate_decompressor, void (*)(libdeflate_decompressor*)> inflater{
      libdeflate_alloc_decompressor(), libdeflate_free_decompressor};
  std::vector<unsigned char> idat;      // IDAT data, when split over several chunks
  std::vector<unsigned char> filtered;  // inflated rows, each with its filter byte
};

Scratch& scratch() {
  thread_local Scratch s;
  return s;
}

int paeth(int a, int b, int c) {
  const int p = a + b - c;
  const int pa = std::abs(p - a), pb = std::abs(p - b), pc = std::abs(p - c);
  if (pa <= pb && pa <= pc) return a;
  return pb <= pc ? b : c;
}

// Undoes one row's filter (PNG spec section 9) into out; prev is the row
// above, already unfiltered, or null for the first row.
bool unfilter_row(int filter, const unsigned char* in, const unsigned char* prev, unsigned char* out,
                  std::size_t stride, std::size_t bpp) {
  switch (filter) {
    case 0:
      std::memcpy(out, in, stride);
      return true;
    case 1:
      for (std::size_t i = 0; i < stride; ++i) {
        out[i] = static_cast<unsigned char>(in[i] + (i >= bpp ? out[i - bpp] : 0));
      }
      return true;
    case 2:
      for (std::size_t i = 0; i < stride; ++i) {
        out[i] = static_cast<unsigned char>(in[i] + (prev ? prev[i] : 0));
      }
      return true;
    case 3:
      for (std::size_t i = 0; i < stride; ++i) {
        const int left = i >= bpp ? out[i - bpp] : 0;
        const int up = prev ? prev[i] : 0;
        out[i] = static_cast<unsigned char>(in[i] + ((left + up) >> 1));
      }
      return true;
    case 4:
      for (std::size_t i = 0; i < stride; ++i) {
        const int left = i >= bpp ? out[i - bpp] : 0;
        const int up = prev ? prev[i] : 0;
        const int up_left = (prev && i >= bpp) ? prev[i - bpp] : 0;
        out[i] = static_cast<unsigned char>(in[i] + paeth(left, up, up_left));
      }
      return true;
    default:
      return false;
  }
}

}  // namespace

bool png_decode_fast(std::string_view bytes, int channels, Image* out) {
  const auto* p = reinterpret_cast<const unsigned char*>(bytes.data());
  const std::size_t n = bytes.size();
  if (n < 8 || std::memcmp(p, "\x89PNG\r\n\x1a\n", 8) != 0) return false;
  Scratch& s = scratch();
  if (!s.inflater) return false;

  std::uint32_t width = 0, height = 0;
  int file_channels = 0;
  const unsigned char* idat = nullptr;  // the only IDAT's data, until a second one appears
  std::size_t idat_len = 0;
  int idat_chunks = 0;
  bool seen_header = false, seen_end = false;
  std::size_t off = 8;
  while (off + 12 <= n && !seen_end) {
    const std::uint32_t len = be32(p + off);
    const unsigned char* type = p + off + 4;
    if (len > n - off - 12) return false;
    const unsigned char* data = type + 4;
    const bool critical = (type[0] & 0x20) == 0;
    if (critical) {
      // libpng checks these CRCs too (a mismatch is its to report); it
      // drops an ancillary chunk with a bad CRC, as skipping does here.
      const std::uint32_t crc = libdeflate_crc32(0, type, len + 4);
      if (crc != be32(data + len)) return false;
    }
    if (is_type(type, "IHDR")) {
      if (seen_header || len != 13) return false;
      seen_header = true;
      width = be32(data);
      height = be32(data + 4);
      const int depth = data[8], color = data[9], compression = data[10], filter = data[11],
                interlace = data[12];
      if (depth != 8 || compression != 0 || filter != 0 || interlace != 0) return false;
      if (color == 0) {
        file_channels = 1;
      } else if (color == 2) {
        file_channels = 3;
      } else {
        return false;  // palette or alpha
      }
    } else if (!seen_header) {
      return false;  // IHDR must come first
    } else if (is_type(type, "IDAT")) {
      if (idat_chunks == 1) s.idat.assign(idat, idat + idat_len);
      if (idat_chunks >= 1) s.idat.insert(s.idat.end(), data, data + len);
      idat = data;
      idat_len = len;
      ++idat_chunks;
    } else if (is_type(type, "IEND")) {
      seen_end = true;
    } else if (!harmless(type)) {
      return false;
    }
    off += 12 + static_cast<std::size_t>(len);
  }
  if (!seen_end || idat_chunks == 0 || width == 0 || height == 0) return false;
  if (width > kMaxSide || height > kMaxSide) return false;
  if (channels != 0 && channels != file_channels) return false;

  const std::uint64_t stride = static_cast<std::uint64_t>(width) * file_channels;
  const std::uint64_t filtered_bytes = (stride + 1) * height;
  if (filtered_bytes > kMaxFilteredBytes) return false;
  s.filtered.resize(filtered_bytes);
  const void* in = idat_chunks == 1 ? static_cast<const void*>(idat) : s.idat.data();
  const std::size_t in_len = idat_chunks == 1 ? idat_len : s.idat.size();
  // Null actual-size: anything but exactly the expected bytes is a failure.
  if (libdeflate_zlib_decompress(s.inflater.get(), in, in_len, s.filtered.data(), filtered_bytes,
                                 nullptr) != LIBDEFLATE_SUCCESS) {
    return false;
  }

  out->width = static_cast<int>(width);
  out->height = static_cast<int>(height);
  out->channels = file_channels;
  out->pixels.resize(stride * height);
  const unsigned char* prev = nullptr;
  for (std::uint64_t y = 0; y < height; ++y) {
    const unsigned char* row = s.filtered.data() + y * (stride + 1);
    unsigned char* dst = out->pixels.data() + y * stride;
    if (!unfilter_row(row[0], row + 1, prev, dst, stride, static_cast<std::size_t>(file_channels))) {
      return false;
    }
    prev = dst;
  }
  return true;
}

}  // namespace hpct::data
