// One self-contained HTML page of sections: `hpctrain report`'s output.
//
// Nothing is fetched when the page is viewed: the charts are inline SVG
// (svg_chart.h), the style is inline, there is no script, and a
// Content-Security-Policy forbids any load but inline styles and data:
// images, so a stray external reference shows as a console error in a
// browser (the report test counts them) instead of a silent fetch. Links
// (the Chrome trace) are plain <a href> and are not loaded with the page.
//
// Another command adds its own plot with add_jsonl_plot: a JSON-lines file
// (one object per line) and the keys to draw, e.g. `hpctrain plan --json`
// output as samples/s against hosts, one line per sync path:
//
//   report::ReportPage page("hpctrain plan");
//   report::add_jsonl_plot(page, {"plan.jsonl", "Predicted samples/s", "hosts", {"samples_per_s"},
//   "path"}); page.write("plan.html");
//
// or from the command line: `hpctrain report --plot
// plan.jsonl:x=hosts:y=samples_per_s:series=path`. Not thread-safe; a page is built by one thread.
#pragma once

#include <string>
#include <vector>

namespace hpct::report {

class ReportPage {
 public:
  explicit ReportPage(std::string title);

  // A section: a heading and its body, which is HTML (escape text with
  // escape_xml). Sections appear in the order added.
  void add_section(const std::string& heading, const std::string& body_html);
  // A line under the title (what was read, when).
  void add_subtitle(const std::string& text);

  size_t section_count() const { return sections_.size(); }

  std::string html() const;
  // Writes html() to path (whole, then renamed). Io naming the path.
  void write(const std::string& path) const;

 private:
  std::string title_;
  std::vector<std::string> subtitles_;
  std::vector<std::pair<std::string, std::string>> sections_;
};

// A line chart of a JSON-lines file: x and each y are keys of the lines'
// objects (numbers; lines without x are skipped, and each y's missing or
// non-numeric values too). series: a key whose value splits the lines
// into one series per value ("path": flat, hierarchical); empty: one series
// per y key.
struct JsonlPlot {
  std::string path;
  std::string title;  // empty: the file's name
  std::string x;
  std::vector<std::string> y;
  std::string series;
};

// Reads plot.path and adds a section with the chart. InvalidArgument with
// one line naming the file and the fix when it cannot be read, is empty, or
// has no line with x and a y.
void add_jsonl_plot(ReportPage& page, const JsonlPlot& plot);

// "FILE:x=KEY:y=KEY[,KEY...][:series=KEY][:title=TEXT]" (the --plot flag).
// InvalidArgument naming the spec and the expected form.
JsonlPlot parse_plot_spec(const std::string& spec);

}  // namespace hpct::report
