// What the launcher and the rank wrapper (`hpctrain launch-rank`, see
// rank_wrapper.h) say to each other. Every spawner (local, ssh, mpirun, srun)
// starts the wrapper, never the user's program directly, so supervision,
// output and teardown work the same on every path.
//
// Protocol, step by step:
//  1. A spawner starts the wrapper with its stdin, stdout and stderr
//     connected to the launcher: pipes for local, the ssh channel for ssh,
//     srun's `--input=all` forwarding (one stdin stream reaches every rank's
//     wrapper); mpirun forwards only output.
//  2. The launcher writes one line on the wrapper's stdin: the RankSpec as
//     JSON (program, working directory, environment, the job secret, the
//     store address, the placement). The secret travels only this way (or,
//     for mpirun/mpiexec, which cannot forward stdin to every rank, in a 0600
//     file in a 0700 directory that the launcher deletes once every rank
//     has started): never in argv or the environment. The launcher then
//     keeps stdin open and writes nothing more.
//  3. The wrapper hands the secret to the program on a pipe (HPCT_SECRET_FD),
//     starts it in its own process group, and writes a Started record.
//  4. Each line the program writes becomes one record on the wrapper's
//     stdout, written with one write(2): `@hpct@ <rank> O <text>` (stdout) or
//     `@hpct@ <rank> E <text>` (stderr). Lines longer than kMaxLine are cut
//     into several records. Other lines on the streams (ssh's or mpirun's own
//     messages) are not records and the launcher shows them as the spawner's.
//  5. When the program ends the wrapper writes `@hpct@ <rank> X exit <code>`
//     or `X signal <n>` (or `X error <message>` when it could not start
//     it), kills whatever the program left in its process group, and exits
//     with the code (128+n for a signal).
//  6. Teardown: end of file on the wrapper's stdin, a broken stdout, or
//     SIGTERM/SIGINT/SIGHUP mean "stop": the wrapper sends SIGTERM to the
//     program's group, SIGKILL after the grace period, then reports as in 5.
//     The launcher stops a job by closing the stdins. If the launcher is
//     killed outright, the kernel closes the pipes (local), the ssh client
//     dies with it (PR_SET_PDEATHSIG) and sshd closes the remote stdin, or
//     mpirun/srun die with it and their daemons end the wrappers: in every
//     case the wrapper sees end of file (or, under mpirun, a signal from
//     mpirun's daemons) and no rank survives.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "launch/placement.h"

namespace hpct::launch {

inline constexpr const char* kRecordMarker = "@hpct@ ";
inline constexpr size_t kMaxLine = 16 * 1024;
inline constexpr size_t kMaxSpecBytes = 4u << 20;

struct RankSpec {
  int rank = -1;                        // -1: read from mpirun's or srun's environment
  int size = 1;                         // the workers (HPCT_SIZE)
  // Parameter servers (launch --servers K): processes size..size+K-1 of the
  // job, placed like ranks (placement has size+K entries), running
  // server_argv with HPCT_PS_ROLE=server instead of argv. Each process with
  // servers in its job gets the secret line twice on HPCT_SECRET_FD: one for
  // the job store (hpct::init), one for the parameter-server connections.
  int servers = 0;
  std::vector<std::string> server_argv;
  std::vector<RankPlacement> placement;  // by rank; empty: from srun's environment
  std::vector<std::string> argv;         // the user's program, looked up in PATH
  std::string cwd;                       // empty: stay where the spawner started us
  std::map<std::string, std::string> env;  // set or overridden in the program's environment
  std::string secret;                    // the job secret (hex)
  std::string store_addr;                // host:port of the job store
  std::string job_id;
  int restart = 0;
  double grace_s = 3.0;                  // SIGTERM to SIGKILL
  // launch --memory-per-rank: the wrapper runs the program in a memory
  // cgroup of its own with this limit (memory_cgroup.h); 0: none.
  std::uint64_t memory_per_rank = 0;
};

// One JSON line without the newline; decode raises InvalidArgument naming
// what is wrong.
std::string encode_spec(const RankSpec& spec);
RankSpec decode_spec(const std::string& line);

enum class RecordKind : char { kStarted = 'S', kStdout = 'O', kStderr = 'E', kExit = 'X' };

struct Record {
  int rank = 0;
  RecordKind kind = RecordKind::kStdout;
  std::string payload;  // the line (no newline), "exit 3", "signal 9", "error ..."
};

// "@hpct@ 3 O text\n".
std::string encode_record(int rank, RecordKind kind, const std::string& payload);
// The record a line (without its newline) holds, or nullopt for other lines.
std::optional<Record> parse_record(const std::string& line);

// How a rank ended, from an X record's payload.
struct RankEnd {
  int exit_code = 0;
  int signal = 0;
  std::string error;  // the wrapper could not start the program
  // The kernel's out-of-memory killer sent the signal (the wrapper saw its
  // count rise in the rank's memory cgroup): the limit (0: none, the host
  // ran out), that cgroup's directory, and whether launch --memory-per-rank
  // made it. On the wire: "signal 9 oom LIMIT 0|1 DIR".
  bool oom = false;
  std::uint64_t oom_limit = 0;
  bool oom_limit_from_launch = false;
  std::string oom_cgroup;
  bool ok() const { return exit_code == 0 && signal == 0 && error.empty(); }
  // "exited with code 3", "was killed by signal 9 (Killed)", "was killed by
  // the kernel's out-of-memory killer ... LIMIT ... CGROUP; FIX".
  std::string describe() const;
  int launcher_exit_code() const;  // code, 128+signal, or 127 for a start error
};
RankEnd parse_rank_end(const std::string& payload);
std::string encode_rank_end(const RankEnd& end);

// Splits a byte stream into lines, cutting lines longer than kMaxLine.
// Not thread-safe; one per stream.
class LineSplitter {
 public:
  template <typename F>
  void feed(const char* data, size_t n, F&& on_line) {
    for (size_t i = 0; i < n; ++i) {
      if (data[i] == '\n') {
        on_line(buf_);
        buf_.clear();
      } else {
        buf_.push_back(data[i]);
        if (buf_.size() >= kMaxLine) {
          on_line(buf_);
          buf_.clear();
        }
      }
    }
  }
  // The unterminated tail at end of stream, if any.
  template <typename F>
  void flush(F&& on_line) {
    if (!buf_.empty()) on_line(buf_);
    buf_.clear();
  }

 private:
  std::string buf_;
};

}  // namespace hpct::launch
