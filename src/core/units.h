// Byte sizes as people write them: 4K, 1M, 256MiB, 1.5G (powers of 1024).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace hpct {

// "4K" -> 4096; InvalidArgument naming the text otherwise.
std::uint64_t parse_bytes(const std::string& text);

// "4K..256M" -> 4K, 16K, ... 256M (each `factor` times the last);
// "4K,1M,3M" -> exactly those; "1M" -> one size.
std::vector<std::uint64_t> parse_byte_sizes(const std::string& text, std::uint64_t factor = 4);

// 4096 -> "4K", 1536 -> "1.5K".
std::string format_bytes(std::uint64_t bytes);

}  // namespace hpct
