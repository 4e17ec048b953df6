#include "core/file.h"

#include <fstream>
#include <sstream>

namespace hpct {

std::string read_file_or_empty(const std::string& path) {
  std::ifstream f(path);
  if (!f) return "";
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

}  // namespace hpct
