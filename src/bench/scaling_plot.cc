#include "bench/scaling_plot.h"

#include <algorithm>
#include <cerrno>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/error.h"

namespace hpct::bench {

std::string scaling_plot_svg(const std::vector<nlohmann::json>& runs) {
  if (runs.empty()) throw_invalid_argument("a scaling plot needs at least one result line");
  const double w = 640, h = 400, l = 70, r = 70, t = 40, b = 50;
  double max_np = 1, max_sps = 1;
  for (const auto& j : runs) {
    max_np = std::max(max_np, j["np"].get<double>());
    max_sps = std::max(max_sps, j["samples_per_s"].get<double>());
  }
  max_sps *= 1.15;
  auto x = [&](double np) {
    return l + (max_np > 1 ? (np - 1) / (max_np - 1) : 0.5) * (w - l - r);
  };
  auto ys = [&](double v) { return h - b - v / max_sps * (h - t - b); };
  auto ye = [&](double e) { return h - b - e / 1.2 * (h - t - b); };
  std::ostringstream o;
  o << "<svg xmlns='http://www.w3.org/2000/svg' width='" << w << "' height='" << h
    << "' font-family='sans-serif' font-size='12'>\n"
    << "<rect width='100%' height='100%' fill='white'/>\n"
    << "<text x='" << w / 2
    << "' y='20' text-anchor='middle'>hpctrain bench train: " << runs[0]["model"].get<std::string>()
    << ", batch " << runs[0]["batch_per_rank"] << " per rank</text>\n"
    << "<line x1='" << l << "' y1='" << h - b << "' x2='" << w - r << "' y2='" << h - b
    << "' stroke='black'/>\n"
    << "<line x1='" << l << "' y1='" << t << "' x2='" << l << "' y2='" << h - b
    << "' stroke='black'/>\n"
    << "<line x1='" << w - r << "' y1='" << t << "' x2='" << w - r << "' y2='" << h - b
    << "' stroke='black'/>\n"
    << "<text x='" << w / 2 << "' y='" << h - 12 << "' text-anchor='middle'>ranks</text>\n"
    << "<text x='15' y='" << t - 10 << "' fill='steelblue'>samples/s</text>\n"
    << "<text x='" << w - r - 20 << "' y='" << t - 10
    << "' fill='darkorange'>efficiency %</text>\n";
  for (int i = 0; i <= 4; ++i) {
    double v = max_sps * i / 4, e = 1.2 * i / 4;
    o << "<text x='" << l - 5 << "' y='" << ys(v) + 4 << "' text-anchor='end'>"
      << static_cast<long>(v) << "</text>\n"
      << "<text x='" << w - r + 5 << "' y='" << ye(e) + 4 << "'>" << static_cast<long>(e * 100)
      << "</text>\n";
  }
  std::string sps_pts, eff_pts;
  for (const auto& j : runs) {
    double np = j["np"].get<double>();
    sps_pts +=
        std::to_string(x(np)) + "," + std::to_string(ys(j["samples_per_s"].get<double>())) + " ";
    eff_pts += std::to_string(x(np)) + "," +
               std::to_string(ye(j["scaling_efficiency"].get<double>())) + " ";
    o << "<text x='" << x(np) << "' y='" << h - b + 16 << "' text-anchor='middle'>" << j["np"]
      << "</text>\n"
      << "<circle cx='" << x(np) << "' cy='" << ys(j["samples_per_s"].get<double>())
      << "' r='4' fill='steelblue' data-np='" << j["np"] << "' data-samples-per-s='"
      << j["samples_per_s"].dump() << "'/>\n"
      << "<circle cx='" << x(np) << "' cy='" << ye(j["scaling_efficiency"].get<double>())
      << "' r='4' fill='darkorange' data-np='" << j["np"] << "' data-efficiency='"
      << j["scaling_efficiency"].dump() << "'/>\n";
  }
  o << "<polyline points='" << sps_pts << "' fill='none' stroke='steelblue' stroke-width='2'/>\n"
    << "<polyline points='" << eff_pts
    << "' fill='none' stroke='darkorange' stroke-width='2'/>\n</svg>\n";
  return o.str();
}

void write_scaling_plot(const std::string& path, const std::vector<nlohmann::json>& runs) {
  const std::string svg = scaling_plot_svg(runs);
  std::ofstream f(path);
  if (!(f << svg)) throw_io("write " + path, errno ? errno : EIO);
}
}  // namespace hpct::bench
