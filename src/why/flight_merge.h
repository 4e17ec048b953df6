// `hpctrain why`: the flight records of a job's ranks (engine/flight_record.h
// writes them to JOB_DIR/flight/rank-R.json), merged into a few lines that
// say which operation the job stopped in, which ranks never reached it and
// what they did instead, where, and which ranks disagreed on it.
//
// How the operation is found: each rank numbers its operations in the order
// it submitted them (the n-th allreduce, allgather or broadcast of that
// rank). The job stopped at the lowest number that some rank has not
// completed (a rank that completed all of its operations stops after its
// last one). At that number, the name most ranks hold is the operation the
// job waited on; a rank holding another name there skipped it or went
// elsewhere; a rank whose record ends before that number never reached it.
// Ranks that hold the name with another shape, dtype or operation are a
// mismatch.
//
// Plain values and pure functions (explain() reads no files), so the merge
// is tested without processes. Reading: read_job_records().
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace hpct::why {

// One operation in a rank's record.
struct Op {
  std::uint64_t seq = 0;
  std::string name, op, reduce, dtype, state, path, site, stack;
  std::vector<std::int64_t> shape;
  std::uint64_t bytes = 0;
  std::int64_t submitted_us = 0, ended_us = 0;  // 0: not yet
  bool done() const { return state == "done"; }
  // "allreduce 'grad.b' float32 [10]"
  std::string describe() const;
};

// What a rank wrapper saw when it asked the rank for its record.
struct WrapperNote {
  bool record_written = false;
  bool program_ended = false;
  bool was_stopped = false;  // a process of the rank was stopped (state T)
  std::int64_t signalled_us = 0;
  std::int64_t waited_ms = 0;
  std::string ended;  // how the program ended on its own, e.g. "was killed by the kernel's out-of-memory killer ..."
};

struct RankRecord {
  int rank = 0;
  std::string host, reason, phase, first_error, last_error;
  std::int64_t phase_since_us = 0, step = -1, written_us = 0;
  std::vector<Op> ops;  // oldest first
};

struct JobRecords {
  std::string dir, job_id;
  int size = 0;                        // from job.json, else the records
  std::vector<std::string> hosts;      // by rank (job.json), may be empty
  std::map<int, RankRecord> ranks;
  std::map<int, WrapperNote> notes;
  std::vector<std::string> unreadable;  // "rank-1.json: ..." for files that did not parse
};

// Parses one rank's record (the JSON text); DataCorrupt naming `what` when
// it is not one.
RankRecord parse_rank_record(const std::string& text, const std::string& what);
WrapperNote parse_wrapper_note(const std::string& text);

// Reads DIR/job.json (written by hpctrain launch; optional) and every
// DIR/flight/rank-*.json. Io when DIR has no flight directory.
JobRecords read_job_records(const std::string& dir);

// The merged verdict.
struct Verdict {
  std::optional<std::uint64_t> stopped_seq;  // the operation's number, when one was found
  std::string op;                            // its description
  std::vector<int> reached, missing, elsewhere, mismatched, no_record;
  std::vector<std::string> lines;            // what `why` prints
};
Verdict explain(const JobRecords& job);

}  // namespace hpct::why
