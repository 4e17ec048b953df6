#include "comm/gloo/failure_report.h"

#include <algorithm>
#include <sstream>
#include <thread>

namespace hpct::comm {
namespace {

bool parse_code(const std::string& s, ErrorCode* out) {
  for (ErrorCode c :
       {ErrorCode::kTimeout, ErrorCode::kPeerFailure, ErrorCode::kInvalidArgument,
        ErrorCode::kDataCorrupt, ErrorCode::kIo, ErrorCode::kMismatch, ErrorCode::kAuth}) {
    if (s == error_code_name(c)) {
      *out = c;
      return true;
    }
  }
  return false;
}

// Keeps every record to one line per field.
std::string one_line(std::string s) {
  std::replace(s.begin(), s.end(), '\n', ' ');
  return s;
}

}  // namespace

std::string failure_report_key(int rank) { return "hpct/failure/" + std::to_string(rank); }

std::string encode_failure_report(const FailureReport& r) {
  std::ostringstream os;
  os << "reporter=" << r.reporter << "\ncode=" << error_code_name(r.code)
     << "\nsuspect=" << r.suspect << "\nop=" << one_line(r.op) << "\ndetail=" << one_line(r.detail)
     << "\n";
  return os.str();
}

bool decode_failure_report(const std::string& text, FailureReport* out) {
  std::istringstream is(text);
  std::string line;
  int fields = 0;
  try {
    while (std::getline(is, line)) {
      const auto eq = line.find('=');
      if (eq == std::string::npos) continue;
      const std::string k = line.substr(0, eq), v = line.substr(eq + 1);
      if (k == "reporter") {
        out->reporter = std::stoi(v);
      } else if (k == "code") {
        if (!parse_code(v, &out->code)) return false;
      } else if (k == "suspect") {
        out->suspect = std::stoi(v);
      } else if (k == "op") {
        out->op = v;
      } else if (k == "detail") {
        out->detail = v;
      } else {
        continue;
      }
      ++fields;
    }
  } catch (const std::exception&) {  // stoi on a torn record
    return false;
  }
  return fields == 5;
}

std::string publish_failure_report(store::Store& store, const FailureReport& own,
                                   const Deadline& deadline) {
  try {
    store.set_by(failure_report_key(own.reporter), encode_failure_report(own), deadline);
    return {};
  } catch (const std::exception& e) {
    // The store may be what failed (a dead launcher, this host cut off);
    // the local error stands.
    return e.what();
  }
}

CollectedReports collect_failure_reports(store::Store& store, const FailureReport& own, int size,
                                         const Deadline& deadline) {
  const Millis settle = std::min(kFailureReportSettle, deadline.budget());
  std::vector<bool> have(size, false);
  have[own.reporter] = true;
  std::vector<bool> accused(size, false);
  if (own.code == ErrorCode::kPeerFailure && own.suspect >= 0 && own.suspect < size) {
    accused[own.suspect] = true;
  }
  CollectedReports out;
  while (true) {
    out.missing.clear();
    for (int r = 0; r < size; ++r) {
      if (have[r]) continue;
      try {
        const std::string key = failure_report_key(r);
        FailureReport rep;
        const std::optional<std::string> text = store.peek_by(key, deadline);
        if (text && decode_failure_report(*text, &rep)) {
          have[r] = true;
          out.reports.push_back(rep);
          if (rep.code == ErrorCode::kPeerFailure && rep.suspect >= 0 && rep.suspect < size) {
            accused[rep.suspect] = true;
          }
          continue;
        }
      } catch (const std::exception&) {
        // A failing store: the rank counts as missing, the wait stays bounded.
      }
      out.missing.push_back(r);
    }
    if (out.missing.empty() || deadline.expired()) break;
    // Only ranks someone saw close are missing: they died. Waiting longer
    // would only delay the same verdict (see the header for the settle time).
    const bool all_accused =
        std::all_of(out.missing.begin(), out.missing.end(), [&](int r) { return accused[r]; });
    if (all_accused && deadline.elapsed() >= settle) break;
    std::this_thread::sleep_for(std::min(kFailureReportPoll, deadline.remaining()));
  }
  std::sort(out.reports.begin(), out.reports.end(),
            [](const FailureReport& a, const FailureReport& b) { return a.reporter < b.reporter; });
  return out;
}

FailureVerdict judge_failure(const FailureReport& own, const CollectedReports& others) {
  FailureVerdict v;
  v.missing = others.missing;
  auto is_missing = [&](int r) {
    return std::find(v.missing.begin(), v.missing.end(), r) != v.missing.end();
  };
  // A dead rank: someone saw its connection close, and it never reported.
  if (own.code == ErrorCode::kPeerFailure && own.suspect >= 0 && is_missing(own.suspect)) {
    v.code = ErrorCode::kPeerFailure;
    v.culprit = own.suspect;
    v.witness = own.reporter;
    return v;
  }
  for (const auto& r : others.reports) {
    if (r.code == ErrorCode::kPeerFailure && r.suspect >= 0 && is_missing(r.suspect)) {
      v.code = ErrorCode::kPeerFailure;
      v.culprit = r.suspect;
      v.witness = r.reporter;
      return v;
    }
  }
  // A close seen without knowing whose (the error named the peer's ephemeral
  // port, not its rank), and exactly one rank never reported: that rank died.
  if (v.missing.size() == 1) {
    int witness = own.code == ErrorCode::kPeerFailure && own.suspect < 0 ? own.reporter : -1;
    for (const auto& r : others.reports) {
      if (witness < 0 && r.code == ErrorCode::kPeerFailure && r.suspect < 0) witness = r.reporter;
    }
    if (witness >= 0) {
      v.code = ErrorCode::kPeerFailure;
      v.culprit = v.missing[0];
      v.witness = witness;
      return v;
    }
  }
  // Stopped or hung ranks: nobody saw them close, they just went quiet.
  if (!v.missing.empty()) {
    v.code = ErrorCode::kTimeout;
    v.culprit = v.missing.size() == 1 ? v.missing[0] : -1;
    return v;
  }
  // Everyone is alive and failed: trust what this rank saw.
  v.code = own.code;
  v.culprit = own.suspect;
  v.witness = own.suspect >= 0 ? own.reporter : -1;
  return v;
}

}  // namespace hpct::comm
