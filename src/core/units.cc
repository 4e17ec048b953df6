#include "core/units.h"

#include <cctype>
#include <cmath>
#include <cstdlib>
#include <sstream>

#include "core/error.h"

namespace hpct {

std::uint64_t parse_bytes(const std::string& text) {
  const char* s = text.c_str();
  char* end = nullptr;
  double v = std::strtod(s, &end);
  if (end == s || v < 0 || !std::isfinite(v)) {
    throw_invalid_argument("'" + text + "' is not a byte size; write e.g. 4096, 64K, 1M, 2G");
  }
  std::string unit(end);
  for (auto& c : unit) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  if (unit == "IB" || unit == "B") unit = "";
  if (unit.size() == 3 && unit.substr(1) == "IB") unit = unit.substr(0, 1);
  if (unit.size() == 2 && unit[1] == 'B') unit = unit.substr(0, 1);
  double mult = 1;
  if (unit == "K") mult = 1024.0;
  else if (unit == "M") mult = 1024.0 * 1024;
  else if (unit == "G") mult = 1024.0 * 1024 * 1024;
  else if (unit == "T") mult = 1024.0 * 1024 * 1024 * 1024;
  else if (!unit.empty()) {
    throw_invalid_argument("'" + text + "' has unknown unit '" + std::string(end) +
                           "'; use K, M, G or T (powers of 1024)");
  }
  return static_cast<std::uint64_t>(std::llround(v * mult));
}

std::vector<std::uint64_t> parse_byte_sizes(const std::string& text, std::uint64_t factor) {
  std::vector<std::uint64_t> out;
  auto dots = text.find("..");
  if (dots != std::string::npos) {
    std::uint64_t lo = parse_bytes(text.substr(0, dots));
    std::uint64_t hi = parse_bytes(text.substr(dots + 2));
    if (lo == 0 || hi < lo || factor < 2) {
      throw_invalid_argument("size range '" + text + "' must go from a positive size up");
    }
    for (std::uint64_t s = lo; s <= hi; s *= factor) out.push_back(s);
    return out;
  }
  std::stringstream ss(text);
  std::string item;
  while (std::getline(ss, item, ',')) {
    if (!item.empty()) out.push_back(parse_bytes(item));
  }
  if (out.empty()) throw_invalid_argument("no sizes in '" + text + "'");
  return out;
}

std::string format_bytes(std::uint64_t bytes) {
  const char* units[] = {"", "K", "M", "G", "T"};
  double v = static_cast<double>(bytes);
  int u = 0;
  while (v >= 1024 && u < 4) {
    v /= 1024;
    ++u;
  }
  std::ostringstream os;
  os << v << units[u];
  return os.str();
}

}  // namespace hpct
