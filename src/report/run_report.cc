#include "report/run_report.h"

#include <algorithm>
#include <cmath>
#include <ctime>
#include <filesystem>
#include <map>
#include <sstream>

#include "bench/scaling_plot.h"
#include "core/error.h"
#include "report/memory_section.h"
#include "report/svg_chart.h"

namespace hpct::report {
namespace fs = std::filesystem;
namespace {

// The four parts of a step, as the metrics name them.
const char* const kSplitKeys[] = {"data_wait_ms", "forward_backward_ms", "sync_wait_ms",
                                  "optimizer_ms"};
const std::vector<std::string> kSplitParts = {"data", "compute (forward+backward)", "sync",
                                              "optimizer"};

double num(const nlohmann::json& j, const char* key) {
  auto it = j.find(key);
  return it != j.end() && it->is_number() ? it->get<double>() : NAN;
}

std::string fmt(double v, int digits = 4) {
  if (!std::isfinite(v)) return "&ndash;";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.*g", digits, v);
  return buf;
}

std::string bytes_text(double n) {
  const char* units[] = {"bytes", "kB", "MB", "GB", "TB"};
  int u = 0;
  while (n >= 1000 && u < 4) {
    n /= 1000;
    ++u;
  }
  return fmt(n, 3) + " " + units[u];
}

std::string utc(double unix_s) {
  if (!std::isfinite(unix_s)) return "&ndash;";
  const std::time_t t = static_cast<std::time_t>(unix_s);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%d %H:%M:%S", &tm);
  return buf;
}

std::string row(const std::vector<std::string>& cells, bool header = false) {
  std::string s = "<tr>";
  for (size_t i = 0; i < cells.size(); ++i) {
    s += header ? "<th>" : (i == 0 ? "<td class='text'>" : "<td>");
    s += cells[i];
    s += header ? "</th>" : "</td>";
  }
  return s + "</tr>\n";
}

std::string note(const std::string& text) { return "<p class='note'>" + text + "</p>\n"; }

bool has_points(const LineChart& c) {
  for (const auto& s : c.series) {
    for (const auto& [x, y] : s.points) {
      if (std::isfinite(x) && std::isfinite(y)) return true;
    }
  }
  return false;
}

// The runs appended to one metrics file: a step line belongs to the last
// "start" at or before it (by time), else a new run begins where the step
// count goes back.
struct Segment {
  std::string name;
  std::vector<const nlohmann::json*> steps;
};

std::vector<Segment> segments(const RunInputs& in) {
  std::vector<Segment> out;
  bool by_time = !in.starts.empty();
  for (const auto& s : in.starts) by_time = by_time && std::isfinite(num(s, "time"));
  for (const auto& j : in.steps) by_time = by_time && std::isfinite(num(j, "time"));
  auto name_of = [&](size_t k) {
    std::string n = "run " + std::to_string(k + 1);
    if (by_time && k < in.starts.size()) {
      const auto& s = in.starts[k];
      if (s.value("restart", 0) > 0)
        n += " (restart " + std::to_string(s.value("restart", 0)) + ")";
      if (s.value("resumed_from_step", -1LL) >= 0) {
        n += " from step " + std::to_string(s.value("resumed_from_step", -1LL));
      }
    }
    return n;
  };
  if (by_time) {
    for (size_t k = 0; k < in.starts.size(); ++k) out.push_back(Segment{name_of(k), {}});
    for (const auto& j : in.steps) {
      size_t k = 0;
      while (k + 1 < in.starts.size() && num(in.starts[k + 1], "time") <= num(j, "time")) ++k;
      out[k].steps.push_back(&j);
    }
    out.erase(
        std::remove_if(out.begin(), out.end(), [](const Segment& s) { return s.steps.empty(); }),
        out.end());
  } else {
    double last = INFINITY;
    for (const auto& j : in.steps) {
      const double step = num(j, "step");
      if (out.empty() || !(step > last)) out.push_back(Segment{name_of(out.size()), {}});
      out.back().steps.push_back(&j);
      last = step;
    }
  }
  if (out.size() == 1) out[0].name = "train";
  return out;
}

std::vector<Marker> markers(const RunInputs& in) {
  std::vector<Marker> m;
  for (const auto& e : in.events) {
    if (std::isfinite(e.step)) m.push_back(Marker{e.step, e.kind, e.kind + ": " + e.text});
  }
  return m;
}

std::string summary_section(const RunInputs& in) {
  std::string body;
  if (in.summaries.empty()) {
    body += note(
        "No summary line: the run did not finish (failed, stopped, or still running); the charts "
        "show what "
        "it wrote so far.");
  } else {
    const auto& s = in.summaries.back();
    body += "<table>\n" +
            row({"model", "ranks", "batch per rank", "steps", "samples/s (training)",
                 "validation loss", "validation accuracy", "wall time (s)", "parameters identical"},
                true) +
            row({escape_xml(s.value("model", std::string("?"))), fmt(num(s, "np")),
                 fmt(num(s, "batch_per_rank")), fmt(num(s, "steps"), 10),
                 fmt(num(s, "train_samples_per_s")), fmt(num(s, "val_loss")),
                 std::isfinite(num(s, "val_accuracy")) ? fmt(num(s, "val_accuracy") * 100) + " %"
                                                       : fmt(NAN),
                 fmt(num(s, "wall_s")),
                 s.contains("params_identical_across_ranks")
                     ? (s["params_identical_across_ranks"].get<bool>() ? "yes" : "NO")
                     : fmt(NAN)}) +
            "</table>\n";
    if (in.summaries.size() > 1) {
      body += note(std::to_string(in.summaries.size()) +
                   " runs ended in these files; the last one is shown.");
    }
  }
  body += note("Read: " + escape_xml([&] {
                 std::string s;
                 const size_t shown = std::min<size_t>(in.files.size(), 12);
                 for (size_t i = 0; i < shown; ++i) s += (i ? ", " : "") + in.files[i];
                 if (shown < in.files.size()) {
                   s += " and " + std::to_string(in.files.size() - shown) + " more";
                 }
                 return s;
               }()));
  return body;
}

std::string throughput_section(const RunInputs& in, const std::vector<Segment>& segs) {
  LineChart c;
  c.id = "throughput";
  c.title = "Throughput";
  c.x_label = "step";
  c.y_label = "samples/s";
  for (const auto& seg : segs) {
    Series s{seg.name, {}, true};
    for (const auto* j : seg.steps)
      s.points.emplace_back(num(*j, "step"), num(*j, "samples_per_s"));
    c.series.push_back(s);
  }
  c.markers = markers(in);
  if (!has_points(c)) return note("No step line has samples/s.");
  return line_chart_svg(c) +
         note(
             "Samples per second of the whole job over each logging interval (train --log-every), "
             "at the "
             "interval's last step. Dashed lines: the run's events (table below).");
}

std::string loss_section(const RunInputs& in, const std::vector<Segment>& segs) {
  std::string body;
  LineChart loss;
  loss.id = "loss";
  loss.title = "Loss";
  loss.x_label = "step";
  loss.y_label = "loss";
  for (const auto& seg : segs) {
    Series s{seg.name + " training loss", {}, true};
    for (const auto* j : seg.steps) s.points.emplace_back(num(*j, "step"), num(*j, "loss"));
    loss.series.push_back(s);
  }
  Series val{"validation loss", {}, true}, acc{"validation accuracy", {}, true};
  for (const auto& e : in.epochs) {
    val.points.emplace_back(num(e, "step"), num(e, "val_loss"));
    acc.points.emplace_back(num(e, "step"), num(e, "val_accuracy"));
  }
  bool has_val = false;
  for (const auto& [x, y] : val.points) has_val = has_val || std::isfinite(y);
  if (has_val) loss.series.push_back(val);
  loss.markers = markers(in);
  if (!has_points(loss))
    return note("No loss was logged: the run ended before its first logging interval.");
  body += line_chart_svg(loss);
  body += note(
      "Training loss: the mean over every rank's batches of each logging interval. Validation "
      "loss: at "
      "each epoch's end, over the whole validation set.");
  bool has_acc = false;
  for (const auto& [x, y] : acc.points) has_acc = has_acc || std::isfinite(y);
  if (has_acc) {
    LineChart a;
    a.id = "accuracy";
    a.title = "Validation accuracy";
    a.x_label = "step";
    a.y_label = "accuracy (fraction)";
    a.series.push_back(acc);
    a.markers = markers(in);
    body += line_chart_svg(a);
  } else {
    body += note(
        "No accuracy: the run had no validation set (train --val) or ended before an epoch did.");
  }
  return body;
}

std::string split_section(const RunInputs& in, const RunReportOptions& o) {
  // The last run's step lines that carry every rank's split.
  std::vector<const nlohmann::json*> with_ranks;
  size_t ranks = 0;
  for (auto it = in.steps.rbegin(); it != in.steps.rend(); ++it) {
    const auto r = it->find("ranks");
    if (r == it->end() || !r->is_array() || r->empty()) continue;
    if (ranks == 0) ranks = r->size();
    if (r->size() == ranks) with_ranks.push_back(&*it);
  }
  StackedBars bars;
  bars.id = "split";
  bars.title = "Mean step time per rank";
  bars.unit = "ms per step";
  bars.parts = kSplitParts;
  std::string body;
  if (!with_ranks.empty()) {
    for (size_t r = 0; r < ranks; ++r) {
      BarRow b{"rank " + std::to_string(r), std::vector<double>(4, 0.0)};
      for (const auto* j : with_ranks) {
        const auto& rj = (*j)["ranks"][r];
        for (int k = 0; k < 4; ++k)
          b.values[k] += num(rj, kSplitKeys[k]) / static_cast<double>(with_ranks.size());
      }
      bars.rows.push_back(b);
    }
    std::string more;
    if (bars.rows.size() > o.max_rank_rows) {
      auto total = [](const BarRow& b) {
        return b.values[0] + b.values[1] + b.values[2] + b.values[3];
      };
      std::stable_sort(bars.rows.begin(), bars.rows.end(),
                       [&](const BarRow& a, const BarRow& b) { return total(a) > total(b); });
      more = " The " + std::to_string(o.max_rank_rows) + " slowest of " +
             std::to_string(bars.rows.size()) + " ranks are drawn.";
      bars.rows.resize(o.max_rank_rows);
    }
    body += stacked_bars_svg(bars);
    body += note("Each rank's mean time per step over the " + std::to_string(with_ranks.size()) +
                 " logging intervals that list every rank: waiting for data, forward and backward, "
                 "waiting for the gradient sync left "
                 "after backward, the optimizer step." +
                 more);
    return body;
  }
  // Older files (or the elastic loop): only the slowest rank's split, if any.
  std::vector<const nlohmann::json*> slowest;
  for (const auto& j : in.steps) {
    if (std::isfinite(num(j, "data_wait_ms"))) slowest.push_back(&j);
  }
  if (slowest.empty()) {
    return note(
        "The step lines carry no time split (an elastic run's loop does not time the step's "
        "parts).");
  }
  BarRow b{"slowest", std::vector<double>(4, 0.0)};
  for (const auto* j : slowest) {
    for (int k = 0; k < 4; ++k)
      b.values[k] += num(*j, kSplitKeys[k]) / static_cast<double>(slowest.size());
  }
  bars.title = "Mean step time of the slowest rank";
  bars.rows.push_back(b);
  body += stacked_bars_svg(bars);
  body += note(
      "This metrics file holds only the slowest rank's split of each interval (no \"ranks\" field: "
      "written "
      "by an hpctrain before per-rank splits); rank 0 names the slowest rank in each step line.");
  return body;
}

std::string scaling_section(const RunInputs& in) {
  std::string body;
  // One chart per model and batch: bench train's lines of hpctrain itself.
  std::map<std::string, std::vector<nlohmann::json>> groups;
  for (const auto& j : in.bench_train) {
    if (j.value("impl", std::string("hpctrain")) != "hpctrain" || !j.contains("scaling_efficiency"))
      continue;
    groups[j.value("model", std::string("?")) + ", batch " +
           j.value("batch_per_rank", nlohmann::json()).dump()]
        .push_back(j);
  }
  for (auto& [name, lines] : groups) {
    std::stable_sort(lines.begin(), lines.end(),
                     [](const nlohmann::json& a, const nlohmann::json& b) {
                       return num(a, "np") < num(b, "np");
                     });
    body += bench::scaling_plot_svg(lines);
  }
  body += "<table>\n" + row({"impl", "model", "ranks", "samples/s", "scaling efficiency",
                             "sync efficiency", "data ms", "compute ms", "sync ms", "optimizer ms"},
                            true);
  for (const auto& j : in.bench_train) {
    const auto split = j.value("split_ms_mean", nlohmann::json::object());
    body += row({escape_xml(j.value("impl", std::string("hpctrain"))),
                 escape_xml(j.value("model", std::string("?"))), fmt(num(j, "np")),
                 fmt(num(j, "samples_per_s")),
                 std::isfinite(num(j, "scaling_efficiency"))
                     ? fmt(num(j, "scaling_efficiency") * 100, 3) + " %"
                     : fmt(NAN),
                 std::isfinite(num(j, "sync_efficiency"))
                     ? fmt(num(j, "sync_efficiency") * 100, 3) + " %"
                     : fmt(NAN),
                 fmt(num(split, "data")), fmt(num(split, "compute")), fmt(num(split, "sync")),
                 fmt(num(split, "optimizer"))});
  }
  body += "</table>\n";
  body += note(
      "Scaling efficiency: samples/s over (ranks &times; the smallest rank count's samples/s per "
      "rank). The "
      "split is the mean over ranks of a timed step (bench train's split_ms_mean).");
  return body;
}

std::string events_section(const RunInputs& in) {
  if (in.events.empty()) {
    return note(
        "No restart, fault, membership change or checkpoint was recorded. Launch with --output-dir "
        "DIR "
        "(its launcher.log) and give DIR to see the launcher's restarts and failures here.");
  }
  std::vector<RunEvent> ev = in.events;
  std::stable_sort(ev.begin(), ev.end(), [](const RunEvent& a, const RunEvent& b) {
    const double ka = std::isfinite(a.time) ? a.time : INFINITY,
                 kb = std::isfinite(b.time) ? b.time : INFINITY;
    if (ka != kb) return ka < kb;
    return (std::isfinite(a.step) ? a.step : INFINITY) <
           (std::isfinite(b.step) ? b.step : INFINITY);
  });
  std::string body =
      "<table id='events'>\n" + row({"time (UTC)", "step", "kind", "what", "from"}, true);
  for (const auto& e : ev) {
    body += "<tr class='event' data-kind='" + escape_xml(e.kind) + "'><td class='text'>" +
            utc(e.time) + "</td><td>" + fmt(e.step, 10) + "</td><td class='text'>" +
            escape_xml(e.kind) + "</td><td class='text'>" + escape_xml(e.text) +
            "</td><td class='text'>" + escape_xml(fs::path(e.source).filename().string()) +
            "</td></tr>\n";
  }
  body += "</table>\n";
  body += note(
      "Steps of launcher lines are the run's step at that time (the last metrics line before it).");
  return body;
}

std::string trace_section(const RunInputs& in, const RunReportOptions& o) {
  if (in.traces.empty()) {
    return note(
        "No Chrome trace: set HPCT_TIMELINE=FILE for the run (rank 0's engine timeline) and give "
        "the file "
        "or its directory.");
  }
  std::string body = "<ul>\n";
  const fs::path base = fs::absolute(o.output_path).parent_path();
  for (const auto& t : in.traces) {
    std::error_code ec;
    fs::path rel = fs::relative(fs::absolute(t), base, ec);
    const std::string href =
        ec || rel.empty() ? "file://" + fs::absolute(t).string() : rel.string();
    const auto size = fs::file_size(t, ec);
    body += "<li><a class='trace' href='" + escape_xml(href) + "'>" +
            escape_xml(fs::path(t).filename().string()) + "</a>" +
            (ec ? "" : " (" + bytes_text(static_cast<double>(size)) + ")") + "</li>\n";
  }
  body += "</ul>\n";
  body += note(
      "The engine's timeline of every tensor (queued, negotiated, fused, communicated, done). Open "
      "it in "
      "chrome://tracing or https://ui.perfetto.dev (Open trace file); the page itself loads "
      "nothing.");
  return body;
}

}  // namespace

void add_run_sections(ReportPage& page, RunInputs in, const RunReportOptions& o) {
  const bool metrics =
      !in.steps.empty() || !in.epochs.empty() || !in.summaries.empty() || !in.starts.empty();
  if (!metrics && in.bench_train.empty() && in.traces.empty()) {
    throw_invalid_argument(
        "nothing to report: no metrics line, bench train line or Chrome trace was read; give the "
        "file of `train --metrics`, `bench train` output or a run directory");
  }
  place_events(&in);
  if (metrics) {
    page.add_section("Run", summary_section(in));
    const auto segs = segments(in);
    if (!segs.empty()) {
      page.add_section("Throughput", throughput_section(in, segs));
    }
    if (!segs.empty() || !in.epochs.empty())
      page.add_section("Loss and accuracy", loss_section(in, segs));
    page.add_section("Step time per rank", split_section(in, o));
    if (has_memory(in)) page.add_section("Memory per rank", memory_section(in));
    page.add_section("Restarts, faults and changes", events_section(in));
  }
  if (!in.bench_train.empty()) page.add_section("Scaling (bench train)", scaling_section(in));
  page.add_section("Chrome trace", trace_section(in, o));
}

}  // namespace hpct::report
