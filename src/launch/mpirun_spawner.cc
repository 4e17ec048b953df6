#include "launch/mpirun_spawner.h"

#include <poll.h>
#include <signal.h>
#include <unistd.h>

#include "core/clock.h"
#include "core/error.h"
#include "launch/child_process.h"

namespace hpct::launch {

std::vector<ProcessPlan> MpirunSpawner::plan(const JobLayout& job) const {
  std::string hosts;
  for (const auto& h : used_hosts(job.ranks)) {
    if (!hosts.empty()) hosts += ',';
    hosts += h.name + ":" + std::to_string(h.slots);
  }
  const std::string np = std::to_string(job.ranks.size());
  ProcessPlan p;
  p.via = "mpirun";
  p.host = "mpirun";
  p.group = true;
  for (const auto& r : job.ranks) p.ranks.push_back(r.rank);
  if (job.private_dir.empty()) {
    throw_invalid_argument("mpirun needs the job's private directory for the rank spec");
  }
  p.spec_file = job.private_dir + "/rank-spec";
  if (options_.flavor == MpiFlavor::kOpenMpi) {
    p.argv = {options_.mpirun, "-np", np, "--host", hosts, "--map-by", "slot", "--bind-to", "none",
              "--stdin", "none"};
    if (options_.is_root) p.argv.push_back("--allow-run-as-root");
    if (options_.ssh_options_given) {
      // plm_rsh_args takes one string; our ssh options have no spaces.
      std::string args;
      for (const auto& o : SshSpawner(options_.ssh).ssh_options()) {
        if (!args.empty()) args += ' ';
        args += o;
      }
      p.argv.insert(p.argv.end(), {"--mca", "plm_rsh_args", args});
    }
    if (!options_.network_interface.empty()) {
      p.argv.insert(p.argv.end(), {"--mca", "btl_tcp_if_include", options_.network_interface,
                                   "--mca", "oob_tcp_if_include", options_.network_interface});
    }
  } else {
    p.argv = {options_.mpirun, "-n", np, "-hosts", hosts};
    if (!options_.network_interface.empty()) {
      p.argv.insert(p.argv.end(), {"-iface", options_.network_interface});
    }
  }
  p.argv.insert(p.argv.end(), options_.extra_args.begin(), options_.extra_args.end());
  for (const auto& w : wrapper_command(job, p.spec_file)) p.argv.push_back(w);
  return {p};
}

MpiFlavor detect_mpi_flavor(const std::string& mpirun) {
  ChildOptions o;
  o.argv = {mpirun, "--version"};
  o.pipe_stdin = false;
  Child c = start_child(o);
  std::string text;
  Deadline deadline(Millis(10000));
  bool open = true;
  while (open && !deadline.expired()) {
    pollfd p{c.stdout_fd.get(), POLLIN, 0};
    ::poll(&p, 1, 100);
    char buf[4096];
    ssize_t n = ::read(c.stdout_fd.get(), buf, sizeof buf);
    if (n == 0) open = false;
    if (n > 0) text.append(buf, static_cast<size_t>(n));
  }
  ::kill(-c.pid, SIGKILL);
  int status;
  while (!reap(c.pid, &status)) ::usleep(1000);
  if (text.find("Open MPI") != std::string::npos || text.find("OpenRTE") != std::string::npos) {
    return MpiFlavor::kOpenMpi;
  }
  if (text.find("HYDRA") != std::string::npos || text.find("MPICH") != std::string::npos) {
    return MpiFlavor::kMpich;
  }
  throw_invalid_argument("'" + mpirun + " --version' names neither Open MPI nor MPICH: " +
                         text.substr(0, 200));
}

}  // namespace hpct::launch
