// `hpctrain why JOBDIR`: what the flight records of a failed (or hung) job
// say: the operation it stopped in, the ranks that never reached it and what
// they did instead, where, and mismatches (src/why/flight_merge.h;
// docs/why.md). hpctrain launch prints the same lines when a job fails.
#include <cstdio>
#include <memory>

#include "commands.h"
#include "why/flight_merge.h"

namespace hpct::cli {
namespace {

struct WhyArgs {
  std::string job_dir;
  bool json = false;
};

std::string json_ranks(const std::vector<int>& ranks) {
  std::string s = "[";
  for (size_t i = 0; i < ranks.size(); ++i) s += (i ? "," : "") + std::to_string(ranks[i]);
  return s + "]";
}

int run_why(const WhyArgs& a) {
  const why::Verdict v = why::explain(why::read_job_records(a.job_dir));
  if (!a.json) {
    for (const auto& line : v.lines) std::printf("%s\n", line.c_str());
    return 0;
  }
  std::printf("{\"stopped_seq\":%s,\"reached\":%s,\"missing\":%s,\"elsewhere\":%s,\"mismatched\":%s,"
              "\"no_record\":%s}\n",
              v.stopped_seq ? std::to_string(*v.stopped_seq).c_str() : "null", json_ranks(v.reached).c_str(),
              json_ranks(v.missing).c_str(), json_ranks(v.elsewhere).c_str(), json_ranks(v.mismatched).c_str(),
              json_ranks(v.no_record).c_str());
  return 0;
}

}  // namespace

void add_why_command(CLI::App& app, Cli& cli) {
  auto a = std::make_shared<WhyArgs>();
  auto* c = app.add_subcommand("why",
                               "Why a job failed or hung, from every rank's flight record: the collective it "
                               "stopped in, the ranks that never reached it, what they did instead and where");
  c->add_option("job_dir", a->job_dir, "The job's directory (launch prints it; HPCT_JOB_DIR)")->required();
  c->add_flag("--json", a->json, "One JSON line: the operation's number and the ranks in each role");
  c->callback([a, &cli] { cli.run = [a] { return run_why(*a); }; });
}

}  // namespace hpct::cli
