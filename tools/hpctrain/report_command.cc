// `hpctrain report INPUT... -o report.html`: one self-contained HTML page
// of a run (src/report/, docs/report.md). INPUT: the file of `train
// --metrics`, `bench train` output, a Chrome trace, or a run directory
// (launch --output-dir, with the metrics and the trace inside). --plot adds
// a chart of any JSON-lines file (hpctrain plan's output).
#include <cstdio>
#include <memory>

#include "commands.h"
#include "core/error.h"
#include "report/report_page.h"
#include "report/run_report.h"

namespace hpct::cli {
namespace {

struct ReportArgs {
  std::vector<std::string> inputs;
  std::string output = "report.html";
  std::string title = "hpctrain report";
  std::vector<std::string> plots;
};

int run_report(const ReportArgs& a) {
  report::RunInputs in;
  for (const auto& path : a.inputs) report::read_run_input(path, &in);
  report::ReportPage page(a.title);
  std::string read;
  for (size_t i = 0; i < a.inputs.size(); ++i) read += (i ? ", " : "") + a.inputs[i];
  page.add_subtitle("From " + read);
  report::RunReportOptions o;
  o.output_path = a.output;
  if (!in.files.empty() || a.plots.empty()) report::add_run_sections(page, in, o);
  for (const auto& spec : a.plots) report::add_jsonl_plot(page, report::parse_plot_spec(spec));
  page.write(a.output);
  std::fprintf(stderr, "hpctrain report: wrote %s\n", a.output.c_str());
  return 0;
}

}  // namespace

void add_report_command(CLI::App& app, Cli& cli) {
  auto a = std::make_shared<ReportArgs>();
  auto* c =
      app.add_subcommand("report",
                         "One self-contained HTML page of a run: metrics, bench train output, "
                         "or a run directory");
  c->add_option("inputs", a->inputs,
                "train --metrics files, bench train output, Chrome traces, or run directories "
                "(launch --output-dir)");
  c->add_option("-o,--output", a->output, "The HTML page to write")->capture_default_str();
  c->add_option("--title", a->title, "The page's title")->capture_default_str();
  c->add_option("--plot", a->plots,
                "Also chart a JSON-lines file: FILE:x=KEY:y=KEY[,KEY...][:series=KEY][:title=TEXT] "
                "(repeatable)")
      ->allow_extra_args(false);
  c->callback([&cli, a] {
    cli.run = [a] {
      if (a->inputs.empty() && a->plots.empty()) {
        throw_invalid_argument(
            "report: nothing to read; usage: hpctrain report METRICS.jsonl|RUN_DIR... -o "
            "report.html");
      }
      return run_report(*a);
    };
  });
}

}  // namespace hpct::cli
