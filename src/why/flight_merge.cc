#include "why/flight_merge.h"

#include <algorithm>
#include <climits>
#include <cstdio>
#include <regex>
#include <set>

#include "core/error.h"

namespace hpct::why {
namespace {

std::string shape_string(const std::vector<std::int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

std::string ranks_string(const std::vector<int>& ranks) {
  std::string s = ranks.size() == 1 ? "rank " : "ranks ";
  for (size_t i = 0; i < ranks.size(); ++i) s += (i ? ", " : "") + std::to_string(ranks[i]);
  return s;
}

std::string seconds(std::int64_t us) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f s", static_cast<double>(us) / 1e6);
  return buf;
}

std::string cut(const std::string& s, size_t n) { return s.size() <= n ? s : s.substr(0, n) + "..."; }

std::string signature(const Op& o) { return o.op + " " + o.reduce + " " + o.dtype + " " + shape_string(o.shape); }

// A record's operations are consecutive numbers (the ring keeps the newest).
const Op* op_at(const RankRecord& r, std::uint64_t seq) {
  if (r.ops.empty() || seq < r.ops.front().seq) return nullptr;
  const std::uint64_t i = seq - r.ops.front().seq;
  if (i < r.ops.size() && r.ops[i].seq == seq) return &r.ops[i];
  for (const Op& o : r.ops) {
    if (o.seq == seq) return &o;
  }
  return nullptr;
}

// The first number before `stop` at which the ranks hold different
// tensors or signatures (over the numbers every record still holds).
std::optional<std::uint64_t> first_divergence(const JobRecords& job, std::uint64_t stop) {
  std::uint64_t lo = 1;
  for (const auto& [r, rec] : job.ranks) {
    if (!rec.ops.empty()) lo = std::max(lo, rec.ops.front().seq);
  }
  for (std::uint64_t s = lo; s < stop; ++s) {
    std::set<std::string> seen;
    for (const auto& [r, rec] : job.ranks) {
      if (const Op* o = op_at(rec, s)) seen.insert(o->name + " " + signature(*o));
    }
    if (seen.size() > 1) return s;
  }
  return std::nullopt;
}

std::map<std::string, std::vector<int>> names_at(const JobRecords& job, std::uint64_t seq) {
  std::map<std::string, std::vector<int>> by_name;
  for (const auto& [r, rec] : job.ranks) {
    if (const Op* o = op_at(rec, seq)) by_name[o->name].push_back(r);
  }
  return by_name;
}

// The first operation a rank has not completed; its number, or one past its last.
std::uint64_t first_open(const RankRecord& r) {
  for (const Op& o : r.ops) {
    if (!o.done()) return o.seq;
  }
  return r.ops.empty() ? 1 : r.ops.back().seq + 1;
}

struct Context {
  const JobRecords& job;
  std::int64_t failed_at_us = 0;  // when the job failed (the first failed operation, or the first record)

  std::string who(int rank) const {
    std::string host;
    if (rank >= 0 && static_cast<size_t>(rank) < job.hosts.size()) host = job.hosts[static_cast<size_t>(rank)];
    auto it = job.ranks.find(rank);
    if (host.empty() && it != job.ranks.end()) host = it->second.host;
    return "rank " + std::to_string(rank) + (host.empty() ? "" : " (host " + host + ")");
  }

  // Where a call came from: its C++ site and Python frames, indented.
  void where(const Op& o, std::vector<std::string>& lines) const {
    if (!o.site.empty()) lines.push_back("      called at " + o.site);
    size_t start = 0;
    while (start < o.stack.size()) {
      size_t nl = o.stack.find('\n', start);
      if (nl == std::string::npos) nl = o.stack.size();
      lines.push_back("      " + o.stack.substr(start, nl - start));
      start = nl + 1;
    }
  }

  // What a rank was doing: its phase, its last operation and where it was
  // called, what its wrapper saw.
  void doing(const RankRecord& r, std::vector<std::string>& lines) const {
    std::string phase = "    in phase " + r.phase;
    if (r.step >= 0) phase += " (step " + std::to_string(r.step) + ")";
    const std::int64_t end = failed_at_us > 0 ? failed_at_us : r.written_us;
    if (r.phase_since_us > 0 && end > r.phase_since_us) {
      phase += ", for " + seconds(end - r.phase_since_us) + " when the job failed";
    }
    lines.push_back(phase);
    auto note = job.notes.find(r.rank);
    if (r.reason == "shutdown") lines.push_back("    its engine had shut down: the program had ended, or was ending");
    if (note != job.notes.end() && note->second.was_stopped) {
      lines.push_back("    its process was stopped (SIGSTOP, or a debugger) when the launcher asked for its record");
    }
    if (r.ops.empty()) {
      lines.push_back("    it recorded no operation");
      return;
    }
    const Op& last = r.ops.back();
    lines.push_back("    its last operation #" + std::to_string(last.seq) + ": " + last.describe() + ", " + last.state);
    where(last, lines);
  }
};

// Ranks that name another rank in their error: the rank named by most.
std::string blamed_in_errors(const Context& c, const std::vector<int>& ranks) {
  static const std::regex rank_re("rank (\\d+)");
  std::map<int, std::set<int>> named_by;
  for (int r : ranks) {
    const std::string e = c.job.ranks.at(r).first_error + "\n" + c.job.ranks.at(r).last_error;
    for (auto it = std::sregex_iterator(e.begin(), e.end(), rank_re); it != std::sregex_iterator(); ++it) {
      const int k = std::stoi((*it)[1].str());
      if (k != r) named_by[k].insert(r);
    }
  }
  int best = -1;
  size_t most = 0;
  bool tie = false;
  for (const auto& [k, by] : named_by) {
    if (by.size() > most) {
      best = k, most = by.size(), tie = false;
    } else if (by.size() == most) {
      tie = true;
    }
  }
  if (best < 0 || tie) return "";
  std::vector<int> by(named_by[best].begin(), named_by[best].end());
  return ranks_string(by) + " name " + c.who(best) + " in their errors: a lost peer (the process gone, its host "
                            "down or cut off from the network)";
}

// The operation at number `stop` (by_name: its names and the ranks holding
// each): who reached it, who went elsewhere, who never got there, who
// disagreed on its shape.
void explain_stop(const Context& c, std::uint64_t stop, const std::map<std::string, std::vector<int>>& by_name,
                  Verdict& v, const std::string& headline, bool brief) {
  const JobRecords& job = c.job;
  // The name most ranks hold (the lowest rank's on a tie).
  auto best = by_name.begin();
  for (auto it = by_name.begin(); it != by_name.end(); ++it) {
    if (it->second.size() > best->second.size() ||
        (it->second.size() == best->second.size() && it->second.front() < best->second.front())) {
      best = it;
    }
  }
  const std::string& name = best->first;
  // Among its ranks, the signature most hold; the others are a mismatch.
  std::map<std::string, std::vector<int>> by_sig;
  for (int r : best->second) by_sig[signature(*op_at(job.ranks.at(r), stop))].push_back(r);
  auto major = by_sig.begin();
  for (auto it = by_sig.begin(); it != by_sig.end(); ++it) {
    if (it->second.size() > major->second.size()) major = it;
  }
  const Op& ref = *op_at(job.ranks.at(major->second.front()), stop);
  std::map<std::string, std::vector<int>> by_state;
  for (int r : best->second) by_state[op_at(job.ranks.at(r), stop)->state].push_back(r);
  std::string states;
  for (const auto& [state, ranks] : by_state) states += (states.empty() ? "" : "; ") + state + " on " + ranks_string(ranks);
  std::vector<int> others;
  for (const auto& [r, rec] : job.ranks) {
    if (std::find(best->second.begin(), best->second.end(), r) == best->second.end()) others.push_back(r);
  }
  v.lines.push_back(headline + " operation #" + std::to_string(stop) + ": " + ref.describe() + " (" + states +
                    (brief && !others.empty() ? "; not on " + ranks_string(others) : "") + ")");
  if (brief) return;
  v.stopped_seq = stop;
  v.op = ref.describe();
  v.reached = best->second;
  for (int r : v.reached) {
    const RankRecord& rec = job.ranks.at(r);
    if (op_at(rec, stop)->state == "failed" && !rec.first_error.empty()) {
      v.lines.push_back("  error on " + c.who(r) + ": " + cut(rec.first_error, 400));
      break;
    }
  }
  for (const auto& [sig, ranks] : by_sig) {
    if (sig == major->first) continue;
    for (int r : ranks) {
      const Op& o = *op_at(job.ranks.at(r), stop);
      v.mismatched.push_back(r);
      v.lines.push_back("  mismatch: " + c.who(r) + " submitted it as " + o.op + " " + o.dtype + " " +
                        shape_string(o.shape) + " where " + ranks_string(major->second) + " had " + ref.op + " " +
                        ref.dtype + " " + shape_string(ref.shape));
      c.where(o, v.lines);
    }
  }
  for (const auto& [r, rec] : job.ranks) {
    const Op* o = op_at(rec, stop);
    if (o != nullptr && o->name == name) continue;
    if (o != nullptr) {
      v.elsewhere.push_back(r);
      // It holds the others' next operation here: it skipped this one. Else
      // it may hold this one later (another order) or never (skipped).
      const Op* next = op_at(job.ranks.at(best->second.front()), stop + 1);
      bool later = false;
      for (const Op& x : rec.ops) later = later || (x.seq > stop && x.name == name);
      if (next != nullptr && next->name == o->name) later = false;
      v.lines.push_back("  " + c.who(r) + (later ? " submitted it later, in another order" : " skipped it") +
                        ": its operation #" + std::to_string(stop) + " is " + o->describe() + ", " + o->state);
      c.where(*o, v.lines);
    } else {
      v.missing.push_back(r);
      v.lines.push_back("  " + c.who(r) + " never reached it:");
    }
    c.doing(rec, v.lines);
  }
  if (v.missing.empty() && v.elsewhere.empty() && v.mismatched.empty() && v.reached.size() > 1) {
    const std::string blamed = blamed_in_errors(c, v.reached);
    v.lines.push_back("  every rank with a record reached it" + (blamed.empty() ? std::string() : "; " + blamed));
  }
}

}  // namespace

std::string Op::describe() const {
  return op + (reduce.empty() ? "" : "(" + reduce + ")") + " '" + name + "' " + dtype + " " + shape_string(shape);
}

Verdict explain(const JobRecords& job) {
  Verdict v;
  Context c{job};
  const int size = job.size > 0 ? job.size : (job.ranks.empty() ? 0 : job.ranks.rbegin()->first + 1);
  std::string head = (job.job_id.empty() ? "job" : "job " + job.job_id) + ", " + std::to_string(size) +
                     " ranks: flight records from ";
  std::vector<int> have;
  for (const auto& [r, rec] : job.ranks) have.push_back(r);
  for (int r = 0; r < size; ++r) {
    if (!job.ranks.count(r)) v.no_record.push_back(r);
  }
  v.lines.push_back(head + (have.empty() ? "no rank" : ranks_string(have)) + " (" + job.dir + ")");
  for (const auto& u : job.unreadable) v.lines.push_back("unreadable: " + u);
  // A program that ended on its own (the OOM killer, a crash) wrote no
  // record: its wrapper's word comes first, being the likely cause.
  for (int r : v.no_record) {
    auto note = job.notes.find(r);
    if (note != job.notes.end() && !note->second.ended.empty()) v.lines.push_back(c.who(r) + " " + note->second.ended);
  }
  if (job.ranks.empty()) {
    v.lines.push_back("no rank wrote a flight record: was HPCT_FLIGHT_RECORD_ENTRIES 0, or the program not an "
                      "hpctrain engine program?");
  }
  std::uint64_t stop = UINT64_MAX;
  for (const auto& [r, rec] : job.ranks) stop = std::min(stop, first_open(rec));
  std::map<std::string, std::vector<int>> by_name;
  for (const auto& [r, rec] : job.ranks) {
    if (const Op* o = op_at(rec, stop)) by_name[o->name].push_back(r);
    for (const Op& o : rec.ops) {
      if (!o.done() && o.ended_us > 0 && (c.failed_at_us == 0 || o.ended_us < c.failed_at_us)) c.failed_at_us = o.ended_us;
    }
  }
  if (c.failed_at_us == 0) {
    for (const auto& [r, rec] : job.ranks) {
      if (c.failed_at_us == 0 || rec.written_us < c.failed_at_us) c.failed_at_us = rec.written_us;
    }
  }
  if (!job.ranks.empty() && by_name.empty()) {
    v.lines.push_back("every rank completed every operation it recorded: the job did not stop in a collective");
    for (const auto& [r, rec] : job.ranks) {
      v.lines.push_back("  " + c.who(r) + ":");
      c.doing(rec, v.lines);
    }
  } else if (!by_name.empty()) {
    // Ranks that went apart earlier (a skipped collective shifts every
    // later number on that rank) are the cause; the stop is its effect.
    if (auto d = first_divergence(job, stop)) {
      explain_stop(c, *d, names_at(job, *d), v, "ranks went apart at", false);
      Verdict at_stop;
      explain_stop(c, stop, by_name, at_stop, "the job then stopped in", true);
      v.lines.insert(v.lines.end(), at_stop.lines.begin(), at_stop.lines.end());
    } else {
      explain_stop(c, stop, by_name, v, "stopped in", false);
    }
  }
  for (int r : v.no_record) {
    std::string line = c.who(r) + ": no flight record";
    auto note = job.notes.find(r);
    if (note != job.notes.end() && !note->second.ended.empty()) {
      line += "; its program ended on its own (above)";
    } else if (note == job.notes.end()) {
      line += "; its wrapper left no note either: its host unreachable (down, or cut off from the network)?";
    } else if (note->second.program_ended) {
      line += "; its program had ended before the launcher stopped the job";
    } else if (!note->second.record_written) {
      line += note->second.was_stopped ? "; its process was stopped and did not answer SIGUSR1 within "
                                       : "; it did not answer SIGUSR1 within ";
      line += std::to_string(note->second.waited_ms) + " ms";
    }
    v.lines.push_back(line);
  }
  return v;
}

}  // namespace hpct::why
