// Failure reports: how the surviving ranks of a Gloo world agree on which
// rank caused a failure, so that each names the root cause instead of the
// healthy neighbour that merely closed its connections after failing.
//
// Why it is needed: when rank D dies, only the ranks talking to D at that
// moment see "connection closed by D". The others see a timeout, or a
// connection closed by a healthy rank H that failed first and closed all of
// its connections (Gloo itself does that on a timeout; we do it on every
// failure so nobody waits out its full timeout). Blaming H would send the
// operator to the wrong host.
//
// Protocol (keys relative to the communicator's store; written once per
// communicator, because a failed communicator is never used again):
//   1. A rank whose operation fails classifies its own evidence: code
//      (timeout or peer-failure), the rank it suspects (-1 if Gloo's message
//      names no peer it can map), the op and Gloo's message.
//   2. It writes that record to "hpct/failure/<rank>" (encode() below; one
//      "field=value" per line), BEFORE closing its connections, so a rank
//      that sees the close can find the record.
//   3. It closes all its connections, so ranks blocked on it fail at once.
//   4. It waits, bounded (GlooOptions::failure_report_wait, at most half the
//      op's timeout, for steps 2 to 4 together: every store call in them
//      ends by that deadline, so a rank cut off from the store's host fails
//      in time too), until every other rank has written its record, polling
//      the store every kFailureReportPoll. It stops early, but not before
//      kFailureReportSettle, when every rank still missing is one that some
//      record says closed its connection: those ranks are dead and more
//      waiting would not change the verdict. The settle time covers a healthy
//      rank that Gloo made close its connections (on its own timeout) just
//      before that rank wrote its record.
//   5. Ranks that wrote no record in that time are the suspects: a killed,
//      stopped or hung process cannot write one. judge() picks the verdict:
//      - some record blames a rank that never reported -> PeerFailure naming
//        it (it died: someone saw its connection close);
//      - otherwise ranks are missing -> Timeout naming them (stopped or hung:
//        nobody saw a close, they simply stopped answering);
//      - otherwise everyone reported -> this rank's own evidence.
// Store errors during the protocol are swallowed: the report is a better
// message, never a reason to fail differently or to wait longer.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "core/clock.h"
#include "core/error.h"
#include "store/store.h"

namespace hpct::comm {

struct FailureReport {
  int reporter = -1;
  ErrorCode code = ErrorCode::kTimeout;
  int suspect = -1;  // the rank the reporter blames; -1 when it cannot tell
  std::string op;
  std::string detail;  // the backend's message
};

std::string encode_failure_report(const FailureReport& r);
// Returns false (and leaves *out unspecified) for a record it cannot parse.
bool decode_failure_report(const std::string& text, FailureReport* out);

std::string failure_report_key(int rank);

struct CollectedReports {
  std::vector<FailureReport> reports;  // other ranks' records, by rank
  std::vector<int> missing;            // ranks (not this one) with no record
};

// Step 2, by deadline.end() (the whole protocol's deadline: a rank cut off
// from the store's host must not wait longer). Never throws: returns the
// store's error, empty when the record was written.
std::string publish_failure_report(store::Store& store, const FailureReport& own,
                                   const Deadline& deadline);

constexpr Millis kFailureReportPoll{20};
constexpr Millis kFailureReportSettle{300};

// Step 4: returns by deadline.end() (every store call ends by then too).
// Never throws; a rank whose record cannot be read (store failure) counts
// as missing.
CollectedReports collect_failure_reports(store::Store& store, const FailureReport& own, int size,
                                         const Deadline& deadline);

struct FailureVerdict {
  ErrorCode code = ErrorCode::kTimeout;
  int culprit = -1;  // -1: unknown
  int witness = -1;  // the rank whose record blamed the culprit (may be this rank)
  std::vector<int> missing;
};

// Step 5.
FailureVerdict judge_failure(const FailureReport& own, const CollectedReports& others);

}  // namespace hpct::comm
