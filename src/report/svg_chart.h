// SVG charts for `hpctrain report`, as text to inline in a page: a line
// chart (series over one x axis, with vertical event markers) and
// horizontal stacked bars (a step's time split, one bar per rank).
//
// Every drawn value carries its numbers in data-* attributes, written so
// they read back exactly (the shortest text that round-trips the double):
// a point is <circle class='point' data-series data-x data-y>, a marker
// <line class='marker' data-kind data-x>, a bar part <rect class='part'
// data-row data-part data-value>. A browser test reads the drawing back and
// compares it with the input; a <title> in each gives the values on hover,
// without script. Pure functions, thread-safe.
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace hpct::report {

struct Series {
  std::string name;
  std::vector<std::pair<double, double>>
      points;        // (x, y) in drawing order; non-finite ones are skipped
  bool line = true;  // false: the points alone
};

// A vertical line across the chart at x: a restart, a fault, a membership
// change, a checkpoint.
struct Marker {
  double x = 0;
  std::string kind;  // restart, fault, membership, resume, checkpoint (colours it)
  std::string label;
};

struct LineChart {
  std::string id;  // the <svg>'s id, unique in the page
  std::string title;
  std::string x_label;
  std::string y_label;
  std::vector<Series> series;
  std::vector<Marker> markers;
};

// InvalidArgument when no series has a finite point.
std::string line_chart_svg(const LineChart& chart);

struct BarRow {
  std::string label;           // "rank 3"
  std::vector<double> values;  // one per part, >= 0
};

struct StackedBars {
  std::string id;
  std::string title;
  std::string unit;                // "ms"
  std::vector<std::string> parts;  // data, compute, sync, optimizer
  std::vector<BarRow> rows;
};

// InvalidArgument when there is no row or a row's values do not match parts.
std::string stacked_bars_svg(const StackedBars& bars);

// &, <, >, ' and " as entities: text and attribute values in SVG and HTML.
std::string escape_xml(const std::string& text);
// The shortest decimal text that reads back as the same double ("0.1", "512").
std::string exact_number(double v);

}  // namespace hpct::report
