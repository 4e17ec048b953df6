#include "doctor/packages.h"

#include <cctype>
#include <fstream>
#include <sstream>

namespace hpct::doctor {

bool tracked_package(const std::string& name) {
  if (name == "hpctrain" || name == "openmpi-bin" || name == "libopenmpi3" || name == "libopenblas0-pthread" ||
      name == "libgloo0") {
    return true;
  }
  // libtorch1.13 is the runtime; libtorch-dev and libtorch-test are not.
  return name.rfind("libtorch", 0) == 0 && name.size() > 8 && std::isdigit(static_cast<unsigned char>(name[8]));
}

std::map<std::string, std::string> parse_dpkg_status(const std::string& text) {
  std::map<std::string, std::string> out;
  std::istringstream in(text);
  std::string line, package, version, status;
  auto flush = [&] {
    if (!package.empty() && status == "install ok installed" && tracked_package(package)) out[package] = version;
    package.clear();
    version.clear();
    status.clear();
  };
  while (std::getline(in, line)) {
    if (line.empty()) {
      flush();
      continue;
    }
    auto colon = line.find(": ");
    if (colon == std::string::npos || line[0] == ' ') continue;
    std::string key = line.substr(0, colon), value = line.substr(colon + 2);
    // Multi-arch packages carry the architecture in Package only as a field of its own.
    if (key == "Package") package = value;
    else if (key == "Version") version = value;
    else if (key == "Status") status = value;
  }
  flush();
  return out;
}

std::map<std::string, std::string> installed_packages() {
  std::ifstream f("/var/lib/dpkg/status");
  if (!f) return {};
  std::stringstream ss;
  ss << f.rdbuf();
  return parse_dpkg_status(ss.str());
}

}  // namespace hpct::doctor
