#include "metrics/discovery.h"

#include <cerrno>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/error.h"

namespace hpct::metrics {
namespace {

bool is_host_port(const std::string& t) {
  auto colon = t.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == t.size()) return false;
  const std::string port = t.substr(colon + 1);
  if (port.size() > 5 || port.find_first_not_of("0123456789") != std::string::npos) return false;
  const int p = std::stoi(port);
  return p >= 1 && p <= 65535;
}

}  // namespace

Targets read_discovery_file(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw_io("read the metrics discovery file " + path, errno ? errno : ENOENT);
  std::stringstream text;
  text << in.rdbuf();
  const std::string fix =
      " (expected the JSON list hpctrain launch --metrics-sd writes: "
      "[{\"targets\": [\"host:port\", ...]}])";
  nlohmann::json doc;
  try {
    doc = nlohmann::json::parse(text.str());
  } catch (const nlohmann::json::exception& e) {
    throw_data_corrupt(path + ": not JSON: " + e.what() + fix);
  }
  if (!doc.is_array()) throw_data_corrupt(path + ": not a list of target groups" + fix);
  Targets out;
  for (const auto& group : doc) {
    if (!group.is_object() || !group.contains("targets") || !group["targets"].is_array()) {
      throw_data_corrupt(path + ": a group without a \"targets\" list" + fix);
    }
    for (const auto& t : group["targets"]) {
      if (!t.is_string() || !is_host_port(t.get<std::string>())) {
        throw_data_corrupt(path + ": target " + t.dump() + " is not \"host:port\"" + fix);
      }
      out.targets.push_back(t.get<std::string>());
    }
    if (group.contains("labels") && group["labels"].is_object() &&
        group["labels"].contains("launch_id") && group["labels"]["launch_id"].is_string()) {
      out.launch_id = group["labels"]["launch_id"].get<std::string>();
    }
  }
  if (out.targets.empty()) throw_data_corrupt(path + ": lists no targets" + fix);
  return out;
}

Targets parse_target_list(const std::string& list) {
  Targets out;
  std::stringstream in(list);
  std::string t;
  while (std::getline(in, t, ',')) {
    if (t.empty()) continue;
    if (!is_host_port(t)) {
      throw_invalid_argument("--targets: '" + t +
                             "' is not host:port (a rank's metrics endpoint, e.g. 10.0.0.2:9400)");
    }
    out.targets.push_back(t);
  }
  if (out.targets.empty()) throw_invalid_argument("--targets: no host:port given");
  return out;
}

}  // namespace hpct::metrics
