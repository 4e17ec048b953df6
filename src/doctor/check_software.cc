// Checks of what is installed: the MPI every host would start, the BLAS
// libtorch would load.
#include <map>

#include "doctor/blas.h"
#include "doctor/checks.h"
#include "doctor/mpi_version.h"

namespace hpct::doctor {
namespace {

std::string install_hint(const std::string& implementation) {
  if (implementation == "MPICH") return "apt-get install mpich";
  if (implementation == "Open MPI") return "apt-get install openmpi-bin";
  return "install " + implementation;
}

}  // namespace

std::vector<Row> check_mpi(const DoctorInput& in) {
  // The reference is what most hosts have (ties: the first listed), so one
  // odd host is the one named, not the rest.
  std::map<std::string, int> count;
  std::vector<std::string> order;
  for (const auto& h : in.hosts) {
    if (!probed(h) || !h.facts->mpi.found) continue;
    std::string label = mpi_label(h.facts->mpi);
    if (count[label]++ == 0) order.push_back(label);
  }
  std::string ref_label;
  int best = 0;
  for (const auto& l : order) {
    if (count[l] > best) {
      best = count[l];
      ref_label = l;
    }
  }
  const MpiFacts* ref = nullptr;
  std::vector<std::string> ref_hosts;
  for (const auto& h : in.hosts) {
    if (probed(h) && h.facts->mpi.found && mpi_label(h.facts->mpi) == ref_label) {
      if (ref == nullptr) ref = &h.facts->mpi;
      ref_hosts.push_back(h.name);
    }
  }
  std::string on_ref;
  for (const auto& n : ref_hosts) on_ref += (on_ref.empty() ? "" : ", ") + n;

  std::vector<Row> rows;
  for (const auto& h : in.hosts) {
    if (!probed(h)) {
      rows.push_back(skipped_row(h, "mpi"));
      continue;
    }
    const MpiFacts& m = h.facts->mpi;
    Row r{{h.name}, "mpi", Status::kOk, mpi_label(m) + " (" + m.path + ")", ""};
    if (!m.found) {
      r.status = Status::kFail;
      r.detail = "no MPI on " + h.name + ": " + m.error;
      r.fix = ref ? install_hint(ref->implementation) + " on " + h.name + " (" + mpi_label(*ref) +
                        " as on " + on_ref + ")"
                  : "apt-get install openmpi-bin on every host";
    } else if (ref != nullptr && m.implementation != ref->implementation) {
      r.status = Status::kFail;
      r.detail = m.implementation + " vs " + ref->implementation + ": " + mpi_label(m) + " on " +
                 h.name + ", " + mpi_label(*ref) + " on " + on_ref + " (they cannot start one job)";
      r.fix = install_hint(ref->implementation) + " on " + h.name + " and put its mpirun (" +
              ref->path + ") first in PATH";
    } else if (ref != nullptr && m.version != ref->version) {
      r.status = Status::kFail;
      r.detail = mpi_label(m) + " on " + h.name + ", " + mpi_label(*ref) + " on " + on_ref;
      r.fix = "install " + mpi_label(*ref) + " on " + h.name + " (the same version everywhere)";
    } else if (m.implementation == "unknown") {
      r.status = Status::kWarn;
      r.detail = m.error;
      r.fix = "use Open MPI or MPICH";
    } else if (ref != nullptr && m.resolved != ref->resolved) {
      // Open MPI starts its daemons by the path it was run from.
      r.status = Status::kWarn;
      r.detail = "mpirun is " + m.resolved + " on " + h.name + ", " + ref->resolved + " on " + on_ref;
      r.fix = "install MPI at the same path on every host";
    }
    rows.push_back(r);
  }
  return rows;
}

std::vector<Row> check_blas(const DoctorInput& in) {
  std::vector<Row> rows;
  for (const auto& h : in.hosts) {
    if (!probed(h)) {
      rows.push_back(skipped_row(h, "blas"));
      continue;
    }
    const BlasFacts& b = h.facts->blas;
    Row r{{h.name}, "blas", Status::kOk, b.kind + (b.variant.empty() ? "" : " (" + b.variant + ")") +
                                             " " + b.path, ""};
    if (b.kind == "built-in") {
      r.detail = "inside " + b.path + " (torch from the package index carries its own; no system BLAS is used)";
    } else if (b.kind == "reference") {
      r.status = Status::kWarn;
      r.detail = "libtorch would use the reference BLAS " + b.path + " (5-20x slower matrix products)";
      r.fix = std::string("apt-get install ") + optimized_blas_package() + " on " + h.name;
    } else if (b.kind == "none") {
      r.status = Status::kWarn;
      r.detail = "no libblas.so.3 on " + h.name + ": libtorch cannot load there";
      r.fix = std::string("apt-get install ") + optimized_blas_package() + " on " + h.name;
    }
    rows.push_back(r);
  }
  return rows;
}

std::vector<Row> check_gpu(const DoctorInput& in) {
  std::vector<Row> rows;
  for (const auto& h : in.hosts) {
    if (!probed(h)) {
      rows.push_back(skipped_row(h, "gpu"));
      continue;
    }
    const GpuFacts& g = h.facts->gpu;
    // No GPU is a fact, not a fault: CPU jobs run there (--device cpu).
    Row r{{h.name}, "gpu", Status::kOk, gpu_summary(g), ""};
    const int n = static_cast<int>(g.gpus.size());
    if (n > 0 && h.slots > n) {
      // Ranks may share a GPU (they then split its time and memory); one
      // rank per GPU is what --device cuda:LOCAL_RANK expects.
      r.status = Status::kWarn;
      r.detail += "; " + std::to_string(h.slots) + " ranks on " + std::to_string(n) + " GPU(s): ranks share GPUs";
      r.fix = "give " + h.name + " at most " + std::to_string(n) + " slots in the hostfile (" + h.name + ":" +
              std::to_string(n) + ") for GPU jobs; sharing works but each rank gets a part of a GPU";
    } else if (n > 0) {
      r.detail += "; " + std::to_string(h.slots) + " rank(s) fit " + std::to_string(n) + " GPU(s)";
    }
    if (n > 0 && g.cuda_torch.empty()) {
      r.status = Status::kWarn;
      r.detail += "; hpctrain's torch is a CPU build";
      r.fix = "build hpctrain against torch's CUDA build (scripts/install-deps.sh installs it) for --device cuda";
    }
    rows.push_back(r);
  }
  return rows;
}

}  // namespace hpct::doctor
