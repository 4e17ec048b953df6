// Checks of a host's clock and capacity.
#include <cmath>
#include <cstdio>

#include "doctor/checks.h"

namespace hpct::doctor {
namespace {

// Timelines and logs of several hosts are merged by wall clock; beyond half a
// second their order lies. Beyond 30 s something is badly wrong (no time
// sync at all), which also breaks TLS and Kerberos for the file systems.
constexpr double kSkewWarnS = 0.5;
constexpr double kSkewFailS = 30;
constexpr std::uint64_t kLowBytes = 1ull << 30;

}  // namespace

std::string gib(std::uint64_t bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f GiB", bytes / double(1ull << 30));
  return buf;
}

std::vector<Row> check_clock(const DoctorInput& in) {
  std::vector<Row> rows;
  for (const auto& h : in.hosts) {
    if (!probed(h) || !h.clock_skew_s) {
      rows.push_back(skipped_row(h, "clock"));
      continue;
    }
    double s = *h.clock_skew_s;
    char buf[96];
    std::snprintf(buf, sizeof buf, "%+.3f s against this host (+-%.3f s)", s, h.clock_error_s);
    Row r{{h.name}, "clock", Status::kOk, buf, ""};
    double a = std::fabs(s) - h.clock_error_s;
    if (a > kSkewWarnS) {
      r.status = a > kSkewFailS ? Status::kFail : Status::kWarn;
      r.fix = "synchronise clocks: systemctl enable --now systemd-timesyncd (or chrony) on " + h.name;
    }
    rows.push_back(r);
  }
  return rows;
}

std::vector<Row> check_resources(const DoctorInput& in) {
  std::vector<Row> rows;
  for (const auto& h : in.hosts) {
    if (!probed(h)) {
      rows.push_back(skipped_row(h, "resources"));
      continue;
    }
    const HostFacts& f = *h.facts;
    Row r{{h.name}, "resources", Status::kOk,
          std::to_string(f.cores) + " cores, " + gib(f.mem_available) + " of " + gib(f.mem_total) +
              " memory free, " + gib(f.disk_free) + " free on " + f.disk_path,
          ""};
    if (f.mem_available < kLowBytes) {
      r.status = Status::kWarn;
      r.fix = "free memory on " + h.name + " (less than 1 GiB available)";
    } else if (f.disk_free < kLowBytes) {
      r.status = Status::kWarn;
      r.fix = "free disk space in " + f.disk_path + " on " + h.name + " (less than 1 GiB)";
    }
    rows.push_back(r);
  }
  return rows;
}

}  // namespace hpct::doctor
