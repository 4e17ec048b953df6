// What `hpctrain report` reads: the files a run leaves behind, sorted by
// kind. A path is one file or a run directory searched three levels down.
//
// Kinds of file, told by their content, not their name:
//   - `train --metrics` JSON lines: "start", "step", "epoch", "elastic",
//     "summary" lines (trainer.h), several runs appended in one file;
//   - `bench train` output: lines with "bench":"train" (other output lines,
//     such as a text table, are ignored);
//   - a Chrome trace (HPCT_TIMELINE): a JSON object with "traceEvents"
//     in its first 256 bytes; only linked, never parsed;
//   - launcher.log of `launch --output-dir`: "<unix seconds> text" lines;
//     restarts, failures and elastic membership changes become events;
//   - rank.N/stdout and rank.N/stderr: "fault: ..." lines, and the log
//     lines naming a straggler ("[hpctrain rank 0 ... straggler] rank 2 on
//     host h2 is the slowest ..."), become events;
//   - checkpoints (ckpt-NNNNNNNNNN.json beside their payload): events.
// In a directory, files of no known kind are skipped; named on the command
// line, they are an error.
#pragma once

#include <cmath>
#include <nlohmann/json.hpp>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <vector>

namespace hpct::report {

// Something that happened to the run, for the timeline.
struct RunEvent {
  double time = NAN;  // Unix seconds, when the source tells
  double step = NAN;  // training step, when the source tells
  std::string kind;   // restart, resume, fault, membership, checkpoint, straggler
  std::string text;
  std::string source;  // the file it came from
};

struct RunInputs {
  // train --metrics lines, in file order.
  std::vector<nlohmann::json> starts, steps, epochs, summaries, elastic;
  std::vector<nlohmann::json> bench_train;  // bench train result lines (every impl)
  std::vector<RunEvent> events;             // unsorted; see place_events
  std::vector<std::string> traces;          // Chrome trace files
  std::vector<std::string> files;           // every file used, in reading order
};

// Adds what path holds to *in. Throws InvalidArgument with one line naming
// the path, the problem and the fix: a path that does not exist, an empty
// file, a file of no known kind (quoting the start of its first line), a
// directory holding no file of a known kind.
void read_run_input(const std::string& path, RunInputs* in);

// Reads one file's text lines as above, for tests: `name` stands for the path.
void read_run_text(const std::string& name, const std::string& text, RunInputs* in);

// Gives every event without a step the step the run was at, by the times of
// the metrics lines (the last line at or before the event; before the
// first, the first line's step). Events with neither stay without a step.
void place_events(RunInputs* in);

}  // namespace hpct::report
