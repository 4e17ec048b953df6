// Small file helpers shared by the layers.
#pragma once

#include <string>

namespace hpct {

// The whole file as text; "" when it is missing or unreadable (for optional
// files: logs, stamps, summaries that a failed step may not have written).
std::string read_file_or_empty(const std::string& path);

}  // namespace hpct
