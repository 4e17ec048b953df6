// The loader's fast path for the PNGs datasets are made of: 8-bit gray or
// RGB, not interlaced, with no chunk that changes pixel values. It inflates
// the image data with libdeflate (whole buffer, about twice zlib's speed on
// small images) and undoes the row filters itself; libpng's simplified API
// spends more on set-up than on pixels for a 28x28 image (Fashion-MNIST:
// 13-14 us per image with libpng, about 5 with this path).
//
// Anything else (16-bit, palette, alpha, interlace, gAMA/iCCP/cHRM/sBIT/
// tRNS/PLTE or unknown chunks, a channel conversion) and anything damaged
// (a bad CRC, data that does not inflate to the expected size, an unknown
// filter) returns false, and the caller decodes with libpng, which gives
// its own verdict on damage. The pixels are the same as libpng's (tested).
#pragma once

#include <string_view>

#include "data/sample.h"

namespace hpct::data {

// channels: 0 keeps the file's; 1 or 3 must match it (else false).
// Thread-safe: each thread keeps its own decompressor and scratch buffer.
bool png_decode_fast(std::string_view bytes, int channels, Image* out);

}  // namespace hpct::data
