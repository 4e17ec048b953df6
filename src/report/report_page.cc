#include "report/report_page.h"

#include <cerrno>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/error.h"
#include "report/svg_chart.h"

namespace hpct::report {

namespace {

const char kStyle[] =
    "body{font-family:sans-serif;margin:24px auto;max-width:980px;color:#222}"
    "h1{font-size:22px;margin-bottom:4px}h2{font-size:17px;margin-top:28px;border-bottom:1px solid "
    "#ddd}"
    ".sub{color:#666;margin:2px 0}table{border-collapse:collapse;margin:8px 0}"
    "td,th{border:1px solid #ddd;padding:3px 8px;text-align:right;font-size:13px}"
    "th{background:#f4f4f4}td.text{text-align:left}.note{color:#555;font-size:13px}"
    "svg.chart{display:block;margin:8px 0;max-width:100%;height:auto}";

}  // namespace

ReportPage::ReportPage(std::string title) : title_(std::move(title)) {}

void ReportPage::add_section(const std::string& heading, const std::string& body_html) {
  sections_.emplace_back(heading, body_html);
}

void ReportPage::add_subtitle(const std::string& text) { subtitles_.push_back(text); }

std::string ReportPage::html() const {
  std::ostringstream o;
  o << "<!DOCTYPE html>\n<html lang='en'>\n<head>\n<meta charset='utf-8'>\n"
    << "<meta http-equiv='Content-Security-Policy' content=\"default-src 'none'; style-src "
       "'unsafe-inline'; "
       "img-src data:\">\n"
    << "<title>" << escape_xml(title_) << "</title>\n<style>" << kStyle
    << "</style>\n</head>\n<body>\n"
    << "<h1>" << escape_xml(title_) << "</h1>\n";
  for (const auto& s : subtitles_) o << "<p class='sub'>" << escape_xml(s) << "</p>\n";
  if (sections_.size() > 1) {
    o << "<p class='sub'>";
    for (size_t i = 0; i < sections_.size(); ++i) {
      o << (i ? " &middot; " : "") << "<a href='#s" << i << "'>" << escape_xml(sections_[i].first)
        << "</a>";
    }
    o << "</p>\n";
  }
  for (size_t i = 0; i < sections_.size(); ++i) {
    o << "<section id='s" << i << "'>\n<h2>" << escape_xml(sections_[i].first) << "</h2>\n"
      << sections_[i].second << "\n</section>\n";
  }
  o << "</body>\n</html>\n";
  return o.str();
}

void ReportPage::write(const std::string& path) const {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
    if (!(f << html()) || !f.flush()) throw_io("write " + tmp, errno ? errno : EIO);
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    const int err = errno;
    std::remove(tmp.c_str());
    throw_io("rename " + tmp + " to " + path, err);
  }
}

void add_jsonl_plot(ReportPage& page, const JsonlPlot& plot) {
  const std::string fix = "give a JSON-lines file whose lines have the keys x=" + plot.x +
                          " and y=" + (plot.y.empty() ? std::string("?") : plot.y[0]);
  if (plot.x.empty() || plot.y.empty()) {
    throw_invalid_argument("plot of " + plot.path +
                           ": name the x key and at least one y key (x=KEY:y=KEY)");
  }
  std::ifstream f(plot.path);
  if (!f) throw_invalid_argument(plot.path + ": cannot be read (no such file?); " + fix);
  LineChart chart;
  chart.id = "plot-" + std::to_string(page.section_count());  // unique in the page
  chart.title =
      plot.title.empty() ? std::filesystem::path(plot.path).filename().string() : plot.title;
  chart.x_label = plot.x;
  chart.y_label = plot.y.size() == 1 ? plot.y[0] : "";
  std::map<std::string, size_t> index;  // series name -> chart.series
  std::string line;
  size_t lines = 0, points = 0;
  while (std::getline(f, line)) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    ++lines;
    auto j = nlohmann::json::parse(line, nullptr, false);
    if (!j.is_object() || !j.contains(plot.x) || !j[plot.x].is_number()) continue;
    const double x = j[plot.x].get<double>();
    for (const auto& key : plot.y) {
      if (!j.contains(key) || !j[key].is_number()) continue;
      std::string name = key;
      if (!plot.series.empty()) {
        const auto& v = j.contains(plot.series) ? j[plot.series] : nlohmann::json("?");
        name = (v.is_string() ? v.get<std::string>() : v.dump()) +
               (plot.y.size() > 1 ? " " + key : "");
      }
      auto [it, added] = index.emplace(name, chart.series.size());
      if (added) chart.series.push_back(Series{name, {}, true});
      chart.series[it->second].points.emplace_back(x, j[key].get<double>());
      ++points;
    }
  }
  if (lines == 0) throw_invalid_argument(plot.path + " is empty; " + fix);
  if (points == 0)
    throw_invalid_argument(plot.path + ": no line has a number at " + plot.x + " and at a y key; " +
                           fix);
  page.add_section(chart.title, line_chart_svg(chart) + "<p class='note'>From " +
                                    escape_xml(plot.path) + ": " + std::to_string(points) +
                                    " points.</p>");
}

JsonlPlot parse_plot_spec(const std::string& spec) {
  const std::string form = "FILE:x=KEY:y=KEY[,KEY...][:series=KEY][:title=TEXT]";
  JsonlPlot p;
  std::vector<std::string> fields;
  std::string field;
  std::istringstream in(spec);
  while (std::getline(in, field, ':')) fields.push_back(field);
  if (fields.size() < 3) throw_invalid_argument("--plot " + spec + ": expected " + form);
  p.path = fields[0];
  for (size_t i = 1; i < fields.size(); ++i) {
    const auto eq = fields[i].find('=');
    const std::string key = fields[i].substr(0, eq),
                      value = eq == std::string::npos ? "" : fields[i].substr(eq + 1);
    if (eq == std::string::npos || value.empty())
      throw_invalid_argument("--plot " + spec + ": expected " + form);
    if (key == "x") {
      p.x = value;
    } else if (key == "y") {
      std::istringstream ys(value);
      std::string y;
      while (std::getline(ys, y, ',')) {
        if (!y.empty()) p.y.push_back(y);
      }
    } else if (key == "series") {
      p.series = value;
    } else if (key == "title") {
      p.title = value;
    } else {
      throw_invalid_argument("--plot " + spec + ": unknown field '" + key + "'; expected " + form);
    }
  }
  if (p.path.empty() || p.x.empty() || p.y.empty())
    throw_invalid_argument("--plot " + spec + ": expected " + form);
  return p;
}

}  // namespace hpct::report
