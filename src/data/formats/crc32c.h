// CRC-32C (Castagnoli), as TFRecord files use it, with TensorFlow's mask.
#pragma once

#include <cstddef>
#include <cstdint>

namespace hpct::data {

// CRC-32C of n bytes, continuing from crc (0 to start). Uses the SSE4.2
// crc32 instruction when the CPU has it, a table otherwise. Thread-safe.
std::uint32_t crc32c(const void* data, size_t n, std::uint32_t crc = 0);

// TensorFlow's masked CRC: rotate right by 15 and add a constant, so a CRC
// stored next to the data it covers does not checksum to a fixed value.
inline std::uint32_t mask_crc(std::uint32_t crc) {
  return ((crc >> 15) | (crc << 17)) + 0xa282ead8u;
}

}  // namespace hpct::data
