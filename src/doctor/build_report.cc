// All checks in table order, and one line of facts per host.
#include <cstdio>

#include "doctor/checks.h"
#include "doctor/mpi_version.h"

namespace hpct::doctor {

const std::vector<std::string>& host_check_names() {
  static const std::vector<std::string> names = {"name",     "ssh",      "known-host", "user",  "ids",
                                                 "hpctrain", "packages", "mpi",        "shared-dir", "ports",
                                                 "clock",    "resources", "blas",      "gpu"};
  return names;
}

Report build_report(const DoctorInput& in) {
  Report rep;
  rep.quick = in.quick;
  rep.ports = in.ports_text;
  for (const auto& h : in.hosts) rep.hosts.push_back(h.name);
  rep.columns = host_check_names();
  using Check = std::vector<Row> (*)(const DoctorInput&);
  for (Check c : {check_name, check_ssh, check_known_host, check_user, check_ids, check_hpctrain, check_packages,
                  check_mpi, check_shared_dir, check_ports, check_clock, check_resources, check_blas,
                  check_gpu}) {
    for (auto& r : c(in)) rep.rows.push_back(std::move(r));
  }
  for (auto& r : check_perf(in, &rep.matrices)) rep.rows.push_back(std::move(r));
  for (const auto& h : in.hosts) {
    if (!h.facts) continue;
    const HostFacts& f = *h.facts;
    std::string line = h.name + ": hpctrain " + f.version + " (" + f.git + ") sha256 " +
                       f.build_sha256.substr(0, 12) +
                       (f.packages.count("hpctrain") ? " (package " + f.packages.at("hpctrain") + ")" : "") + ", " +
                       mpi_label(f.mpi) + ", BLAS " + f.blas.kind + ", " +
                       (f.gpu.gpus.empty() ? std::string("no GPU") : std::to_string(f.gpu.gpus.size()) + " GPU(s)") +
                       ", " + std::to_string(f.cores) + " cores, " + gib(f.mem_total) + " memory";
    if (h.clock_skew_s) {
      char buf[48];
      std::snprintf(buf, sizeof buf, ", clock %+.3f s", *h.clock_skew_s);
      line += buf;
    }
    rep.facts.push_back(line);
  }
  return rep;
}

}  // namespace hpct::doctor
