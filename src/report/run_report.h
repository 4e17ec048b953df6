// The sections of `hpctrain report` for what a run left behind
// (run_inputs.h): the run's summary, throughput, loss and accuracy over the
// steps with the run's events (restarts, faults, membership changes,
// checkpoints) marked on them, the step's time split per rank, the scaling
// chart and efficiency of `bench train` output, the event table and a link
// to the Chrome trace. Each section says so when its data is missing and
// what would provide it.
#pragma once

#include <string>

#include "report/report_page.h"
#include "report/run_inputs.h"

namespace hpct::report {

struct RunReportOptions {
  // Where the page will be written: links (the Chrome trace) are made
  // relative to its directory.
  std::string output_path = "report.html";
  size_t max_rank_rows = 64;  // the split chart's rows; the slowest ranks first beyond it
};

// Adds the sections to page. in: as read_run_input left it (events are
// placed here). InvalidArgument when in holds neither metrics lines nor
// bench train lines nor a trace (nothing to report).
void add_run_sections(ReportPage& page, RunInputs in, const RunReportOptions& o);

}  // namespace hpct::report
