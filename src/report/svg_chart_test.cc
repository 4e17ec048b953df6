#include "report/svg_chart.h"

#include <gtest/gtest.h>

#include <cmath>

#include "core/error.h"

namespace hpct::report {
namespace {

size_t count(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

TEST(SvgChart, LineChartCarriesEveryFinitePointExactly) {
  LineChart c;
  c.id = "tp";
  c.title = "Throughput <all ranks>";
  c.x_label = "step";
  c.series.push_back(Series{"run 1", {{10, 512.25}, {20, 0.1}, {30, NAN}}, true});
  c.series.push_back(Series{"run 2", {{20, 1e6}}, false});
  c.markers.push_back(Marker{15, "restart", "restart 1 & resume"});
  c.markers.push_back(Marker{NAN, "fault", "no step known"});
  const std::string svg = line_chart_svg(c);
  EXPECT_EQ(svg.rfind("<svg ", 0), 0u) << svg;
  EXPECT_NE(svg.find("id='tp'"), std::string::npos);
  EXPECT_EQ(count(svg, "<circle class='point'"), 3u) << svg;  // the NaN point is skipped
  EXPECT_NE(svg.find("data-series='run 1' data-x='10.0' data-y='512.25'"), std::string::npos)
      << svg;
  EXPECT_NE(svg.find("data-series='run 1' data-x='20.0' data-y='0.1'"), std::string::npos) << svg;
  EXPECT_NE(svg.find("data-series='run 2' data-x='20.0' data-y='1000000.0'"), std::string::npos)
      << svg;
  EXPECT_EQ(count(svg, "<polyline"), 1u);  // run 2 is points only
  EXPECT_EQ(count(svg, "class='marker'"), 1u);
  EXPECT_NE(svg.find("data-kind='restart' data-x='15.0'"), std::string::npos);
  EXPECT_NE(svg.find("Throughput &lt;all ranks&gt;"), std::string::npos);
  EXPECT_NE(svg.find("restart 1 &amp; resume"), std::string::npos);
  EXPECT_EQ(svg.find("<all"), std::string::npos);
  EXPECT_NE(svg.find("</svg>"), std::string::npos);
}

TEST(SvgChart, OnePointAndAllZeroStillDraw) {
  LineChart c;
  c.id = "one";
  c.series.push_back(Series{"a", {{5, 0}}, true});
  const std::string svg = line_chart_svg(c);
  EXPECT_EQ(count(svg, "<circle class='point'"), 1u);
  EXPECT_EQ(svg.find("nan"), std::string::npos) << svg;
  EXPECT_EQ(svg.find("inf"), std::string::npos) << svg;
}

TEST(SvgChart, NoFinitePointIsAnError) {
  LineChart c;
  c.title = "empty";
  c.series.push_back(Series{"a", {{NAN, 1}}, true});
  EXPECT_THROW(line_chart_svg(c), Error);
}

TEST(SvgChart, StackedBarsOneRectPerPartWithItsValue) {
  StackedBars b;
  b.id = "split";
  b.unit = "ms";
  b.parts = {"data", "compute", "sync", "optimizer"};
  b.rows.push_back(BarRow{"rank 0", {1.5, 20, 3.25, 0.5}});
  b.rows.push_back(BarRow{"rank 1", {0, 30, 0.75, 0.5}});
  const std::string svg = stacked_bars_svg(b);
  EXPECT_EQ(count(svg, "<rect class='part'"), 8u);
  EXPECT_NE(svg.find("data-row='rank 0' data-part='sync' data-value='3.25'"), std::string::npos)
      << svg;
  EXPECT_NE(svg.find("data-row='rank 1' data-part='compute' data-value='30.0'"), std::string::npos)
      << svg;
  b.rows.push_back(BarRow{"rank 2", {1}});
  EXPECT_THROW(stacked_bars_svg(b), Error);
  EXPECT_THROW(stacked_bars_svg(StackedBars{}), Error);
}

TEST(SvgChart, EscapesAndExactNumbers) {
  EXPECT_EQ(escape_xml("a<b>&'\""), "a&lt;b&gt;&amp;&#39;&quot;");
  EXPECT_EQ(std::stod(exact_number(0.1 + 0.2)), 0.1 + 0.2);
  EXPECT_EQ(exact_number(512), "512.0");
}

}  // namespace
}  // namespace hpct::report
