// The job's output: every line of every rank, prefixed, written whole.
//
// Each line is written with one write(2), so lines from ranks never
// interleave mid-line, even when several launchers share a terminal. With an
// output directory each rank's lines also go, unprefixed, to
// DIR/rank.N/stdout and DIR/rank.N/stderr, and the launcher's own lines
// (restarts, membership changes, failures) to DIR/launcher.log, each after
// its time in Unix seconds ("1795000000.123 restarting the job ..."),
// appended across launches into the same directory. The last lines of each rank's
// stderr are kept for the failure summary. Not thread-safe: the supervisor's
// one thread owns it.
#pragma once

#include <deque>
#include <string>
#include <vector>

#include "core/fd.h"

namespace hpct::launch {

enum class OutputPrefix { kNone, kRank, kHost };

// none | rank | host; InvalidArgument otherwise.
OutputPrefix parse_output_prefix(const std::string& name);

class OutputMux {
 public:
  // host_by_rank names each rank's host for --prefix host. Creates
  // output_dir/rank.N/ (Io naming the path when it cannot).
  OutputMux(OutputPrefix prefix, std::vector<std::string> host_by_rank,
            const std::string& output_dir, int stdout_fd = 1, int stderr_fd = 2,
            size_t tail_lines = 10);
  OutputMux(const OutputMux&) = delete;
  OutputMux& operator=(const OutputMux&) = delete;

  // "[3] text" on our stdout or stderr, and the rank's file.
  void rank_line(int rank, bool is_stderr, const std::string& text);
  // A line a spawner wrote itself (ssh's, mpirun's): "[source] text".
  void spawner_line(const std::string& source, bool is_stderr, const std::string& text);
  // "hpctrain launch: text" on stderr.
  void launcher_line(const std::string& text);

  const std::deque<std::string>& stderr_tail(int rank) const;
  // The rank's host as placement has it (srun ranks tell theirs when they start).
  void set_host(int rank, const std::string& host);
  const std::string& host(int rank) const { return hosts_.at(static_cast<size_t>(rank)); }
  // Another rank (an elastic job's new worker) on host; returns its number,
  // the next one in order.
  int add_rank(const std::string& host);

 private:
  std::string prefix(int rank) const;
  void open_files(size_t rank);

  OutputPrefix prefix_;
  std::vector<std::string> hosts_;
  int stdout_fd_;
  int stderr_fd_;
  size_t tail_lines_;
  std::vector<std::deque<std::string>> tails_;
  std::string output_dir_;
  UniqueFd launcher_log_;         // DIR/launcher.log with an output directory
  std::vector<UniqueFd> files_;  // 2 per rank (stdout, stderr) with an output directory
};

}  // namespace hpct::launch
