#include "core/world.h"

#include <cerrno>
#include <cstdlib>
#include <optional>

#include "core/error.h"

namespace hpct {
namespace {

std::optional<int> read_int(const Env& env, const char* name) {
  auto v = env.get(name);
  if (!v) return std::nullopt;
  char* end = nullptr;
  errno = 0;
  long n = std::strtol(v->c_str(), &end, 10);
  if (v->empty() || *end != '\0' || errno != 0 || n < 0 || n > 1 << 24) {
    throw_invalid_argument(std::string(name) + "=" + *v +
                           " is not a rank or count; the launcher that set it is misconfigured");
  }
  return static_cast<int>(n);
}

int read_int_or(const Env& env, const char* name, int fallback) {
  auto v = read_int(env, name);
  return v ? *v : fallback;
}

// Slurm's "2(x3),1" task counts per node: how many tasks run on node `node`.
std::optional<int> slurm_tasks_on_node(const std::string& spec, int node) {
  int index = 0;
  size_t pos = 0;
  while (pos < spec.size()) {
    size_t comma = spec.find(',', pos);
    if (comma == std::string::npos) comma = spec.size();
    std::string item = spec.substr(pos, comma - pos);
    int tasks = std::atoi(item.c_str());
    int repeat = 1;
    size_t x = item.find("(x");
    if (x != std::string::npos) repeat = std::atoi(item.c_str() + x + 2);
    if (node < index + repeat) return tasks;
    index += repeat;
    pos = comma + 1;
  }
  return std::nullopt;
}

void check(const WorldInfo& w, const char* rank_var) {
  if (w.size < 1 || w.rank >= w.size) {
    throw_invalid_argument(std::string(rank_var) + "=" + std::to_string(w.rank) +
                           " is not below the job size " + std::to_string(w.size) +
                           "; the launcher that set it is misconfigured");
  }
}

}  // namespace

const char* launcher_name(Launcher l) {
  switch (l) {
    case Launcher::kNone: return "none";
    case Launcher::kHpctrain: return "hpctrain";
    case Launcher::kOpenMpi: return "mpirun";
    case Launcher::kPmi: return "pmi";
    case Launcher::kSlurm: return "srun";
    case Launcher::kKubernetes: return "kubernetes indexed job";
  }
  return "?";
}

WorldInfo discover_world(const Env& env) {
  WorldInfo w;
  const bool openmpi = env.get("OMPI_COMM_WORLD_SIZE").has_value();
  const bool pmi = env.get("PMI_RANK").has_value() || env.get("PMIX_RANK").has_value();
  w.mpi_runtime = openmpi || pmi;

  if (auto r = read_int(env, "HPCT_RANK")) {
    w.launcher = Launcher::kHpctrain;
    w.rank = *r;
    w.size = read_int_or(env, "HPCT_SIZE", 1);
    w.local_rank = read_int_or(env, "HPCT_LOCAL_RANK", w.rank);
    w.local_size = read_int_or(env, "HPCT_LOCAL_SIZE", w.size);
    w.cross_rank = read_int_or(env, "HPCT_CROSS_RANK", 0);
    w.cross_size = read_int_or(env, "HPCT_CROSS_SIZE", 1);
    w.restart = read_int_or(env, "HPCT_RESTART", 0);
    check(w, "HPCT_RANK");
  } else if (openmpi) {
    w.launcher = Launcher::kOpenMpi;
    w.rank = read_int_or(env, "OMPI_COMM_WORLD_RANK", 0);
    w.size = read_int_or(env, "OMPI_COMM_WORLD_SIZE", 1);
    w.local_rank = read_int_or(env, "OMPI_COMM_WORLD_LOCAL_RANK", 0);
    w.local_size = read_int_or(env, "OMPI_COMM_WORLD_LOCAL_SIZE", 1);
    w.cross_rank = read_int_or(env, "OMPI_COMM_WORLD_NODE_RANK", 0);
    check(w, "OMPI_COMM_WORLD_RANK");
  } else if (pmi) {
    w.launcher = Launcher::kPmi;
    w.rank = read_int_or(env, "PMI_RANK", read_int_or(env, "PMIX_RANK", 0));
    w.size = read_int_or(env, "PMI_SIZE", read_int_or(env, "SLURM_NTASKS", 1));
    w.local_rank = read_int_or(env, "MPI_LOCALRANKID", read_int_or(env, "SLURM_LOCALID", 0));
    w.local_size = read_int_or(env, "MPI_LOCALNRANKS", 1);
    check(w, "PMI_RANK");
  } else if (auto r = read_int(env, "SLURM_PROCID")) {
    w.launcher = Launcher::kSlurm;
    w.rank = *r;
    w.size = read_int_or(env, "SLURM_NTASKS", 1);
    w.local_rank = read_int_or(env, "SLURM_LOCALID", 0);
    w.cross_rank = read_int_or(env, "SLURM_NODEID", 0);
    w.cross_size = read_int_or(env, "SLURM_NNODES", read_int_or(env, "SLURM_JOB_NUM_NODES", 1));
    w.local_size = 1;
    if (auto spec = env.get("SLURM_STEP_TASKS_PER_NODE")) {
      if (auto n = slurm_tasks_on_node(*spec, w.cross_rank)) w.local_size = *n;
    } else if (auto spec2 = env.get("SLURM_TASKS_PER_NODE")) {
      if (auto n = slurm_tasks_on_node(*spec2, w.cross_rank)) w.local_size = *n;
    }
    check(w, "SLURM_PROCID");
  } else if (auto r = read_int(env, "JOB_COMPLETION_INDEX")) {
    auto n = read_int(env, "HPCT_SIZE");
    if (!n) {
      throw_invalid_argument("JOB_COMPLETION_INDEX=" + std::to_string(*r) +
                             " says this is a pod of a Kubernetes Indexed Job, but HPCT_SIZE is not set: "
                             "set it in the pod's env to the Job's completions (deploy/k8s/indexed-job.yaml)");
    }
    w.launcher = Launcher::kKubernetes;
    w.rank = *r;
    w.size = *n;
    w.cross_rank = *r;  // one rank per pod, each pod its own host
    w.cross_size = *n;
    check(w, "JOB_COMPLETION_INDEX");
  }
  return w;
}

}  // namespace hpct
