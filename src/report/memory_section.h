// The report's "Memory per rank" section: what each rank held of the model
// (parameters, gradients, optimizer state: its part when sharded) and its
// process's peak resident memory.
//
// Read from the run's metrics lines, the last that has them:
//   - a "summary" line's "memory": [{"parameter_bytes", "gradient_bytes",
//     "optimizer_state_bytes", "peak_rss_bytes"}, ...], one object per rank
//     in rank order;
//   - else the last "step" line whose "ranks" entries carry those keys.
// A key a line does not have shows as a dash.
#pragma once

#include <string>

#include "report/run_inputs.h"

namespace hpct::report {

// Whether the run's lines hold any memory figure (the section is shown only then).
bool has_memory(const RunInputs& in);

// The section's HTML: a table of one row per rank and a note on where the
// figures came from.
std::string memory_section(const RunInputs& in);

}  // namespace hpct::report
