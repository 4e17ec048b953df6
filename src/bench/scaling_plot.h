// The SVG chart of `hpctrain bench train --plot FILE.svg`: samples/s (left
// axis) and scaling efficiency (right axis, %) against the rank count, one
// point per result line.
#pragma once

#include <nlohmann/json_fwd.hpp>
#include <string>
#include <vector>

namespace hpct::bench {

// The SVG text: the same chart, for a page that inlines it (`hpctrain
// report`). Each point is a <circle> with data-np and data-samples-per-s or
// data-efficiency, so a test can check the drawing against the lines.
// InvalidArgument when runs is empty.
std::string scaling_plot_svg(const std::vector<nlohmann::json>& runs);

// runs: bench train's result lines (np, samples_per_s, scaling_efficiency,
// model, batch_per_rank), at least one. Io naming the path when it cannot be
// written; InvalidArgument when runs is empty.
void write_scaling_plot(const std::string& path, const std::vector<nlohmann::json>& runs);

}  // namespace hpct::bench
