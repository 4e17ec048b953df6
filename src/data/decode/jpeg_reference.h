// libjpeg-turbo's own decode loop (jpeg_read_scanlines into one reused
// buffer, nothing else), the reference `hpctrain bench data` holds
// decode_image against.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace hpct::data {

// Decodes every image of `images` once per pass, `passes` times; returns
// the total pixel bytes produced (so the work cannot be optimized away).
// DataCorrupt when an image does not decode. Thread-safe.
std::uint64_t reference_jpeg_decode(const std::vector<std::string>& images, int passes);

}  // namespace hpct::data
