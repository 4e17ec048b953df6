// The targets of a job's ranks from the Prometheus file-based discovery
// file that `hpctrain launch --metrics-sd FILE` writes (file_sd_configs,
// JSON: [{"targets": ["host:port", ...], "labels": {"launch_id": ID}}, ...]), or
// from a list given on the command line.
#pragma once

#include <string>
#include <vector>

namespace hpct::metrics {

struct Targets {
  std::vector<std::string> targets;  // host:port, in the file's order
  std::string launch_id;             // the groups' launch_id label, if any
};

// Io when the file cannot be read, DataCorrupt (naming the file and the
// fix) when it is not a file_sd JSON list.
Targets read_discovery_file(const std::string& path);

// "h1:9400,h2:9400" -> targets. InvalidArgument naming the entry that is
// not host:port with a port in 1..65535.
Targets parse_target_list(const std::string& list);

}  // namespace hpct::metrics
