// PNG (libpng) and JPEG (libjpeg-turbo) to 8-bit HWC pixels, and back (for
// packing and for tests).
//
// Decoders raise DataCorrupt with the codec's own complaint; callers prefix
// where the bytes came from (shard, member, offset). All functions are
// thread-safe (no shared state) and never read past the given bytes.
#pragma once

#include <string>
#include <string_view>

#include "data/sample.h"

namespace hpct::data {

enum class ImageFormat { kUnknown, kPng, kJpeg };

// From the magic bytes, not the extension.
ImageFormat sniff_image(std::string_view bytes);

// channels: 0 keeps what the file has (1 gray, 3 RGB; gray+alpha and RGBA
// lose alpha), 1 forces gray, 3 forces RGB.
Image decode_image(std::string_view bytes, int channels = 0);
// The same into *out, reusing its pixel buffer (no allocation once it is
// large enough): the loader's hot path.
void decode_image_into(std::string_view bytes, int channels, Image* out);
Image decode_png(std::string_view bytes, int channels = 0);
Image decode_jpeg(std::string_view bytes, int channels = 0);

// 1- or 3-channel images. quality: 1..100.
std::string encode_png(const Image& image);
std::string encode_jpeg(const Image& image, int quality = 90);

}  // namespace hpct::data
