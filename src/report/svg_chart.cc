#include "report/svg_chart.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/error.h"

namespace hpct::report {
namespace {

// Distinct on white and for the common kinds of colour blindness (Okabe-Ito).
const char* const kPalette[] = {"#0072B2", "#E69F00", "#009E73", "#CC79A7",
                                "#56B4E9", "#D55E00", "#F0E442", "#000000"};

const char* marker_colour(const std::string& kind) {
  if (kind == "fault") return "#D55E00";
  if (kind == "restart" || kind == "resume") return "#CC79A7";
  if (kind == "membership") return "#009E73";
  return "#999999";  // checkpoint and anything else
}

// Short axis text: 3 significant digits, no exponent below a million.
std::string tick_text(double v) {
  char buf[32];
  if (std::fabs(v) >= 1e6 || (v != 0 && std::fabs(v) < 1e-3)) {
    std::snprintf(buf, sizeof buf, "%.2g", v);
  } else {
    std::snprintf(buf, sizeof buf, "%.4g", v);
  }
  return buf;
}

// About n round ticks covering [lo, hi]; widens hi and lo to tick values.
std::vector<double> nice_ticks(double* lo, double* hi, int n) {
  if (!(*hi > *lo)) {
    const double pad = *lo == 0 ? 1 : std::fabs(*lo) * 0.1;
    *lo -= pad;
    *hi += pad;
  }
  const double raw = (*hi - *lo) / n;
  const double mag = std::pow(10, std::floor(std::log10(raw)));
  double step = mag;
  for (double m : {1.0, 2.0, 2.5, 5.0, 10.0}) {
    if (raw <= m * mag) {
      step = m * mag;
      break;
    }
  }
  *lo = std::floor(*lo / step) * step;
  *hi = std::ceil(*hi / step) * step;
  std::vector<double> ticks;
  for (double t = *lo; t <= *hi + step * 1e-9 && ticks.size() < 50; t += step) {
    ticks.push_back(std::fabs(t) < step * 1e-9 ? 0 : t);
  }
  return ticks;
}

void legend(std::ostringstream& o, double x, double y, const std::vector<std::string>& names,
            const std::vector<std::string>& colours) {
  for (size_t i = 0; i < names.size(); ++i) {
    const double ly = y + static_cast<double>(i) * 16;
    // Long names are cut to the legend's width; the whole name is the tooltip.
    const std::string shown = names[i].size() > 30 ? names[i].substr(0, 29) + "\u2026" : names[i];
    o << "<rect x='" << x << "' y='" << ly - 9 << "' width='10' height='10' fill='" << colours[i]
      << "'/><text x='" << x + 14 << "' y='" << ly << "'><title>" << escape_xml(names[i])
      << "</title>" << escape_xml(shown) << "</text>\n";
  }
}

}  // namespace

std::string escape_xml(const std::string& text) {
  std::string out;
  out.reserve(text.size());
  for (char c : text) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '\'':
        out += "&#39;";
        break;
      case '"':
        out += "&quot;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

std::string exact_number(double v) { return nlohmann::json(v).dump(); }

namespace {

// The range of the chart's finite points (y from 0 at least) and markers.
void chart_range(const LineChart& chart, double* x_lo_out, double* x_hi_out, double* y_lo_out, double* y_hi_out) {
  double& x_lo = *x_lo_out;
  double& x_hi = *x_hi_out;
  double& y_lo = *y_lo_out;
  double& y_hi = *y_hi_out;
  x_lo = INFINITY;
  x_hi = -INFINITY;
  y_lo = 0;
  y_hi = -INFINITY;
  for (const auto& s : chart.series) {
    for (const auto& [x, y] : s.points) {
      if (!std::isfinite(x) || !std::isfinite(y)) continue;
      x_lo = std::min(x_lo, x);
      x_hi = std::max(x_hi, x);
      y_lo = std::min(y_lo, y);
      y_hi = std::max(y_hi, y);
    }
  }
  if (!std::isfinite(x_lo))
    throw_invalid_argument("chart '" + chart.title + "': no finite point to draw");
  for (const auto& m : chart.markers) {
    if (std::isfinite(m.x)) {
      x_lo = std::min(x_lo, m.x);
      x_hi = std::max(x_hi, m.x);
    }
  }
}

}  // namespace

std::string line_chart_svg(const LineChart& chart) {
  double x_lo, x_hi, y_lo, y_hi;
  chart_range(chart, &x_lo, &x_hi, &y_lo, &y_hi);
  y_hi = y_hi > y_lo ? y_hi * 1.05 : y_hi;
  const auto y_ticks = nice_ticks(&y_lo, &y_hi, 5);
  if (!(x_hi > x_lo)) {
    x_lo -= 1;
    x_hi += 1;
  }
  const double w = 860, h = 330, l = 70, r = 230, t = 34, b = 46;
  auto px = [&](double x) { return l + (x - x_lo) / (x_hi - x_lo) * (w - l - r); };
  auto py = [&](double y) { return h - b - (y - y_lo) / (y_hi - y_lo) * (h - t - b); };

  std::ostringstream o;
  o << "<svg xmlns='http://www.w3.org/2000/svg' class='chart' id='" << escape_xml(chart.id)
    << "' width='" << w << "' height='" << h << "' viewBox='0 0 " << w << ' ' << h
    << "' font-family='sans-serif' font-size='12'>\n"
    << "<rect width='100%' height='100%' fill='white'/>\n"
    << "<text x='" << (l + w - r) / 2 << "' y='18' text-anchor='middle' font-weight='bold'>"
    << escape_xml(chart.title) << "</text>\n";
  for (double v : y_ticks) {
    o << "<line x1='" << l << "' y1='" << py(v) << "' x2='" << w - r << "' y2='" << py(v)
      << "' stroke='#e5e5e5'/><text x='" << l - 6 << "' y='" << py(v) + 4 << "' text-anchor='end'>"
      << tick_text(v) << "</text>\n";
  }
  {
    double lo = x_lo, hi = x_hi;
    for (double v : nice_ticks(&lo, &hi, 6)) {
      if (v < x_lo - 1e-9 || v > x_hi + 1e-9) continue;
      o << "<text x='" << px(v) << "' y='" << h - b + 16 << "' text-anchor='middle'>"
        << tick_text(v) << "</text>\n";
    }
  }
  o << "<line x1='" << l << "' y1='" << h - b << "' x2='" << w - r << "' y2='" << h - b
    << "' stroke='black'/>\n"
    << "<line x1='" << l << "' y1='" << t << "' x2='" << l << "' y2='" << h - b
    << "' stroke='black'/>\n"
    << "<text x='" << (l + w - r) / 2 << "' y='" << h - 8 << "' text-anchor='middle'>"
    << escape_xml(chart.x_label) << "</text>\n"
    << "<text transform='translate(16," << (t + h - b) / 2 << ") rotate(-90)' text-anchor='middle'>"
    << escape_xml(chart.y_label) << "</text>\n";
  for (const auto& m : chart.markers) {
    if (!std::isfinite(m.x)) continue;
    o << "<line class='marker' data-kind='" << escape_xml(m.kind) << "' data-x='"
      << exact_number(m.x) << "' x1='" << px(m.x) << "' y1='" << t << "' x2='" << px(m.x)
      << "' y2='" << h - b << "' stroke='" << marker_colour(m.kind)
      << "' stroke-width='2' stroke-dasharray='5,3'><title>" << escape_xml(m.label)
      << "</title></line>\n";
  }
  std::vector<std::string> names, colours;
  for (size_t i = 0; i < chart.series.size(); ++i) {
    const auto& s = chart.series[i];
    const std::string colour = kPalette[i % (sizeof kPalette / sizeof kPalette[0])];
    names.push_back(s.name);
    colours.push_back(colour);
    std::string pts;
    std::ostringstream dots;
    for (const auto& [x, y] : s.points) {
      if (!std::isfinite(x) || !std::isfinite(y)) continue;
      pts += std::to_string(px(x)) + "," + std::to_string(py(y)) + " ";
      dots << "<circle class='point' data-series='" << escape_xml(s.name) << "' data-x='"
           << exact_number(x) << "' data-y='" << exact_number(y) << "' cx='" << px(x) << "' cy='"
           << py(y) << "' r='3' fill='" << colour << "'><title>" << escape_xml(s.name) << ": "
           << escape_xml(chart.x_label) << ' ' << tick_text(x) << ", " << tick_text(y)
           << "</title></circle>\n";
    }
    if (s.line && !pts.empty()) {
      o << "<polyline points='" << pts << "' fill='none' stroke='" << colour
        << "' stroke-width='1.5'/>\n";
    }
    o << dots.str();
  }
  std::vector<std::string> kinds;
  for (const auto& m : chart.markers) {
    if (std::isfinite(m.x) && std::find(kinds.begin(), kinds.end(), m.kind) == kinds.end())
      kinds.push_back(m.kind);
  }
  for (const auto& k : kinds) {
    names.push_back(k);
    colours.push_back(marker_colour(k));
  }
  legend(o, w - r + 14, t + 8, names, colours);
  o << "</svg>\n";
  return o.str();
}

std::string stacked_bars_svg(const StackedBars& bars) {
  if (bars.rows.empty()) throw_invalid_argument("chart '" + bars.title + "': no row to draw");
  double max_total = 0;
  for (const auto& row : bars.rows) {
    if (row.values.size() != bars.parts.size()) {
      throw_invalid_argument("chart '" + bars.title + "': row " + row.label + " has " +
                             std::to_string(row.values.size()) + " values for " +
                             std::to_string(bars.parts.size()) + " parts");
    }
    double total = 0;
    for (double v : row.values) total += std::isfinite(v) && v > 0 ? v : 0;
    max_total = std::max(max_total, total);
  }
  double lo = 0, hi = max_total;
  const auto ticks = nice_ticks(&lo, &hi, 5);
  const double row_h = 22, l = 80, r = 230, t = 34, b = 40, w = 860;
  const double h = t + b + row_h * static_cast<double>(bars.rows.size());
  auto px = [&](double v) { return l + v / hi * (w - l - r); };
  std::ostringstream o;
  o << "<svg xmlns='http://www.w3.org/2000/svg' class='chart' id='" << escape_xml(bars.id)
    << "' width='" << w << "' height='" << h << "' viewBox='0 0 " << w << ' ' << h
    << "' font-family='sans-serif' font-size='12'>\n"
    << "<rect width='100%' height='100%' fill='white'/>\n"
    << "<text x='" << (l + w - r) / 2 << "' y='18' text-anchor='middle' font-weight='bold'>"
    << escape_xml(bars.title) << "</text>\n";
  for (double v : ticks) {
    o << "<line x1='" << px(v) << "' y1='" << t << "' x2='" << px(v) << "' y2='" << h - b
      << "' stroke='#e5e5e5'/>"
      << "<text x='" << px(v) << "' y='" << h - b + 16 << "' text-anchor='middle'>" << tick_text(v)
      << "</text>\n";
  }
  o << "<text x='" << (l + w - r) / 2 << "' y='" << h - 6 << "' text-anchor='middle'>"
    << escape_xml(bars.unit) << "</text>\n";
  std::vector<std::string> colours;
  for (size_t k = 0; k < bars.parts.size(); ++k)
    colours.push_back(kPalette[k % (sizeof kPalette / sizeof kPalette[0])]);
  for (size_t i = 0; i < bars.rows.size(); ++i) {
    const auto& row = bars.rows[i];
    const double y = t + row_h * static_cast<double>(i);
    o << "<text x='" << l - 6 << "' y='" << y + row_h / 2 + 4 << "' text-anchor='end'>"
      << escape_xml(row.label) << "</text>\n";
    double at = 0;
    for (size_t k = 0; k < row.values.size(); ++k) {
      const double v = std::isfinite(row.values[k]) && row.values[k] > 0 ? row.values[k] : 0;
      o << "<rect class='part' data-row='" << escape_xml(row.label) << "' data-part='"
        << escape_xml(bars.parts[k]) << "' data-value='" << exact_number(row.values[k]) << "' x='"
        << px(at) << "' y='" << y + 3 << "' width='" << px(at + v) - px(at) << "' height='"
        << row_h - 6 << "' fill='" << colours[k] << "'><title>" << escape_xml(row.label) << ' '
        << escape_xml(bars.parts[k]) << ": " << tick_text(v) << ' ' << escape_xml(bars.unit)
        << "</title></rect>\n";
      at += v;
    }
  }
  o << "<line x1='" << l << "' y1='" << t << "' x2='" << l << "' y2='" << h - b
    << "' stroke='black'/>\n";
  legend(o, w - r + 14, t + 8, bars.parts, colours);
  o << "</svg>\n";
  return o.str();
}

}  // namespace hpct::report
