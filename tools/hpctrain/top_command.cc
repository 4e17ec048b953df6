// `hpctrain top`: a live view of a running job, one row per rank, read from
// the ranks' Prometheus endpoints (docs/metrics.md). Targets come from the
// launcher's discovery file (--metrics-sd, read again every round, so a
// relaunched job is followed) or from --targets. Every round scrapes all
// ranks in parallel, each read bounded by --timeout. On a terminal the
// table is redrawn in place (ANSI) with the latest events under it;
// otherwise every round prints one plain line per rank, and every event a
// line of its own.
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <ctime>
#include <deque>
#include <thread>

#include "commands.h"
#include "core/error.h"
#include "metrics/discovery.h"
#include "metrics/job_view.h"
#include "metrics/scrape.h"

namespace hpct::cli {
namespace {

struct TopArgs {
  std::string metrics_sd;
  std::string targets;
  double interval_s = 1;
  double timeout_s = 1;
  double stall_after_s = 5;
  double window_s = 5;
  int count = 0;
  bool plain = false;
};

std::string clock_stamp() {
  std::time_t t = std::time(nullptr);
  std::tm tm{};
  ::localtime_r(&t, &tm);
  char b[16];
  std::strftime(b, sizeof b, "%H:%M:%S", &tm);
  return b;
}

int run_top(const TopArgs& a) {
  if (a.metrics_sd.empty() == a.targets.empty()) {
    throw_invalid_argument(
        "hpctrain top: give the job's discovery file (--metrics-sd FILE, as written by "
        "hpctrain launch --metrics-sd) or its endpoints (--targets host:port,...), one of the two");
  }
  if (!(a.interval_s >= 0.1) || !(a.timeout_s >= 0.05) || !(a.stall_after_s > 0) ||
      !(a.window_s > 0) || a.count < 0) {
    throw_invalid_argument(
        "hpctrain top: --interval must be at least 0.1 s, --timeout at least 0.05 s, "
        "--stall-after and --window above 0, --count 0 (until Ctrl-C) or more");
  }
  const bool ansi = !a.plain && ::isatty(STDOUT_FILENO) == 1;
  metrics::JobViewOptions vo;
  vo.stall_after_s = a.stall_after_s;
  vo.window_s = a.window_s;
  metrics::JobView view(vo);
  metrics::Targets targets;
  if (!a.targets.empty()) targets = metrics::parse_target_list(a.targets);
  std::deque<std::string> recent;  // the latest events, under the table
  std::string source_error;
  const auto start = std::chrono::steady_clock::now();
  const auto timeout = std::chrono::milliseconds(static_cast<long>(a.timeout_s * 1000));
  if (ansi) std::fputs("\x1b[2J", stdout);
  for (int round = 0; a.count == 0 || round < a.count; ++round) {
    const auto round_start = std::chrono::steady_clock::now();
    if (!a.metrics_sd.empty()) {
      // Read again every round; a file that went bad keeps the last good targets.
      try {
        targets = metrics::read_discovery_file(a.metrics_sd);
        source_error.clear();
      } catch (const Error& e) {
        if (targets.targets.empty() && round == 0) throw;
        source_error = e.what();
      }
    }
    auto results = metrics::scrape_targets(targets.targets, timeout);
    const double now =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    auto events = view.update(results, now);
    const std::string stamp = clock_stamp();
    auto rows = view.rows();
    if (ansi) {
      for (auto& e : events) recent.push_back(stamp + " " + e);
      while (recent.size() > 8) recent.pop_front();
      double total = 0;
      for (const auto& r : rows) total += r.samples_per_s > 0 ? r.samples_per_s : 0;
      std::string frame = "\x1b[H";
      char head[256];
      std::snprintf(
          head, sizeof head,
          "hpctrain top  job %s  %zu ranks  %.1f samples/s  %s  (every %.1f s; Ctrl-C ends)",
          targets.launch_id.empty() ? "?" : targets.launch_id.c_str(), rows.size(), total, stamp.c_str(),
          a.interval_s);
      frame += std::string(head) + "\x1b[K\n";
      if (!source_error.empty()) frame += "\x1b[1;31m" + source_error + "\x1b[0m\x1b[K\n";
      frame += "\x1b[K\n";
      const std::string table = metrics::format_table(rows, true);
      for (size_t p = 0; p < table.size();) {
        size_t e = table.find('\n', p);
        frame += table.substr(p, e - p) + "\x1b[K\n";
        p = e + 1;
      }
      if (!recent.empty()) frame += "\x1b[K\nevents:\x1b[K\n";
      for (const auto& e : recent) frame += "  " + e + "\x1b[K\n";
      frame += "\x1b[J";
      std::fputs(frame.c_str(), stdout);
    } else {
      if (!source_error.empty()) std::printf("%s error: %s\n", stamp.c_str(), source_error.c_str());
      for (const auto& e : events) std::printf("%s event: %s\n", stamp.c_str(), e.c_str());
      std::fputs(metrics::format_lines(rows, stamp).c_str(), stdout);
    }
    std::fflush(stdout);
    if (a.count != 0 && round + 1 == a.count) break;
    const auto next =
        round_start + std::chrono::milliseconds(static_cast<long>(a.interval_s * 1000));
    std::this_thread::sleep_until(next);
  }
  return 0;
}

}  // namespace

void add_top_command(CLI::App& app, Cli& cli) {
  auto a = std::make_shared<TopArgs>();
  auto* c =
      app.add_subcommand("top", "Live view of a running job's ranks from their metrics endpoints");
  c->add_option("--metrics-sd", a->metrics_sd,
                "The job's discovery file (hpctrain launch --metrics-sd FILE)");
  c->add_option("--targets", a->targets, "The ranks' endpoints instead: host:port,host:port,...");
  c->add_option("--interval", a->interval_s, "Seconds between rounds")->capture_default_str();
  c->add_option("--timeout", a->timeout_s, "Bound of each round's reads, seconds")
      ->capture_default_str();
  c->add_option("--stall-after", a->stall_after_s,
                "Mark a rank STALLED when no step ends for this long, seconds")
      ->capture_default_str();
  c->add_option("--window", a->window_s, "Rates over the last this many seconds")
      ->capture_default_str();
  c->add_option("--count", a->count, "Stop after this many rounds (0: until Ctrl-C)")
      ->capture_default_str();
  c->add_flag("--plain", a->plain, "Plain lines even on a terminal");
  c->callback([&cli, a] { cli.run = [a] { return run_top(*a); }; });
}

}  // namespace hpct::cli
