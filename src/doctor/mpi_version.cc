#include "doctor/mpi_version.h"

#include "core/regex.h"

namespace hpct::doctor {
namespace {

// The first capture of `re` in text, or "".
std::string first_match(const std::string& text, const Regex& re) {
  const auto m = re.search(text);
  return m ? m->group(1) : std::string();
}

}  // namespace

void parse_mpirun_version(const std::string& output, MpiFacts& out) {
  static const Regex kVersionWord(R"(Version:?\s+([0-9][0-9A-Za-z.\-]*))");
  if (output.find("Open MPI") != std::string::npos || output.find("OpenRTE") != std::string::npos) {
    out.implementation = "Open MPI";
    // "mpirun (Open MPI) 4.1.4"
    out.version = first_match(output, Regex(R"(\((?:Open MPI|OpenRTE)\)\s+([0-9][0-9A-Za-z.\-]*))"));
  } else if (output.find("Intel(R) MPI") != std::string::npos) {
    out.implementation = "Intel MPI";
    out.version = first_match(output, Regex(R"(Version\s+([0-9][0-9A-Za-z.\-]*))"));
  } else if (output.find("MVAPICH") != std::string::npos) {
    out.implementation = "MVAPICH2";
    out.version = first_match(output, kVersionWord);
  } else if (output.find("HYDRA") != std::string::npos || output.find("MPICH") != std::string::npos) {
    out.implementation = "MPICH";
    out.version = first_match(output, kVersionWord);
  } else {
    out.implementation = "unknown";
    out.version.clear();
  }
}

std::string mpi_label(const MpiFacts& m) {
  if (!m.found) return "none";
  return m.version.empty() ? m.implementation : m.implementation + " " + m.version;
}

}  // namespace hpct::doctor
