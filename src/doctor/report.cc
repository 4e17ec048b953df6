#include "doctor/report.h"

namespace hpct::doctor {
namespace {

int severity(Status s) {
  switch (s) {
    case Status::kSkip: return 0;
    case Status::kOk: return 1;
    case Status::kWarn: return 2;
    case Status::kFail: return 3;
  }
  return 3;
}

}  // namespace

const char* status_name(Status s) {
  switch (s) {
    case Status::kOk: return "ok";
    case Status::kWarn: return "warn";
    case Status::kFail: return "fail";
    case Status::kSkip: return "skip";
  }
  return "?";
}

Status worst(Status a, Status b) { return severity(a) >= severity(b) ? a : b; }

bool Report::ready() const {
  for (const auto& r : rows) {
    if (r.status == Status::kFail) return false;
  }
  return true;
}

}  // namespace hpct::doctor
