// `hpctrain cluster setup` and `hpctrain cluster status`: make bare Debian
// hosts into a training cluster with the Ansible playbooks in
// deploy/ansible, then check it with doctor (src/cluster/, docs/cluster.md).
// Exit 0 when every host finished and every doctor check passed, 1
// otherwise, 2 on bad arguments, 124 when the run outlived --timeout.
#include "cluster/ansible_run.h"
#include "cluster/cluster_setup.h"
#include "commands.h"
#include "core/subprocess.h"

namespace hpct::cli {
namespace {

struct ClusterArgs {
  cluster::SetupOptions o;
  std::string packages = "online";
  int verbose = 0;
};

void add_common(CLI::App* c, ClusterArgs& a) {
  c->add_option("--hostfile", a.o.hostfile, "Hosts, as for launch: 'host slots=N', 'host:N' or 'host' per line")
      ->required();
  c->add_option("-i,--ssh-identity", a.o.identity, "The key that logs in as --ssh-user on every host");
  c->add_option("--state-dir", a.o.state_dir,
                "Where setup keeps the inventory, the cluster key and known host keys (default: HOSTFILE.cluster)");
  c->add_option("--playbooks", a.o.playbooks, "The playbooks folder (default: the installed or source copy)");
  c->add_option("--timeout", a.o.timeout_s, "Seconds the playbook run may take in all")->capture_default_str();
  c->add_flag("-v,--verbose", a.verbose, "Ansible's own output (-vv, -vvv: more)");
}

std::string playbooks_for(const cluster::SetupOptions& o) {
  return cluster::find_playbooks(o.playbooks, self_executable(), HPCT_ANSIBLE_SOURCE_DIR);
}

}  // namespace

void add_cluster_command(CLI::App& app, Cli& cli) {
  auto* cluster = app.add_subcommand("cluster", "Make bare Linux hosts into a training cluster (Ansible), or check one");
  cluster->require_subcommand(1);

  auto setup = std::make_shared<ClusterArgs>();
  auto* s = cluster->add_subcommand(
      "setup", "Same user, ssh trust, /etc/hosts, packages, shared dir (and Slurm) on every host, then doctor");
  add_common(s, *setup);
  s->add_option("--ssh-user", setup->o.ssh_user, "Who Ansible logs in as (needs root or sudo)")->capture_default_str();
  s->add_option("-p,--ssh-port", setup->o.ssh_port, "ssh port");
  s->add_option("--user", setup->o.user, "The training user made on every host")->capture_default_str();
  s->add_option("--uid", setup->o.uid, "Its uid and gid on every host (default: its uid where it exists, else the first id free everywhere)");
  s->add_option("--shared-dir", setup->o.shared_dir, "A directory shared by every host at this path, e.g. /shared");
  s->add_option("--shared-from", setup->o.shared_from, "The host that holds it (default: the first listed)");
  s->add_option("--shared-type", setup->o.shared_type,
                "nfs, sshfs (FUSE), existing (only checked), or auto: nfs where every kernel has it, else sshfs")
      ->capture_default_str();
  s->add_flag("--slurm", setup->o.slurm, "Also munge, slurmctld on the first host and slurmd everywhere");
  s->add_option("--scratch-dir", setup->o.scratch_dir,
                "A parallel scratch file system over every host, mounted at this path, e.g. /mnt/parallel");
  s->add_option("--scratch-type", setup->o.scratch_type, "Its kind: glusterfs (one distributed volume, FUSE)")
      ->capture_default_str();
  s->add_option("--scratch-size", setup->o.scratch_size, "Each host's RAM brick, as tmpfs takes it (4G, 25%)");
  s->add_flag("--scratch-ram", setup->o.scratch_ram,
              "Bricks on tmpfs: RAM-fast scratch, lost when a host restarts");
  s->add_option("--packages", setup->packages,
                "Package source: online (the hosts' mirror), proxy[:URL] (apt proxy on this machine, port 3142), "
                "bundle (made here from --deb and what the roles install, kept in the state folder), "
                "bundle:DIR (.deb files copied over)")
      ->capture_default_str();
  s->add_option("--deb", setup->o.deb,
                "The hpctrain .deb to install (online, proxy, bundle without a folder; make package builds it)");
  s->add_flag("--dry-run", setup->o.dry_run, "Show per host what would change (diffs); change nothing");
  s->add_option("--forks", setup->o.forks, "Hosts configured at once (default: all, up to 32)");
  s->callback([&cli, setup] {
    cli.run = [setup] {
      setup->o.packages = cluster::parse_package_source(setup->packages);
      setup->o.verbosity = setup->verbose;
      return cluster::run_setup(setup->o, playbooks_for(setup->o));
    };
  });

  auto status = std::make_shared<ClusterArgs>();
  auto* st = cluster->add_subcommand("status", "What setup manages, host by host (ok or drift), plus doctor");
  add_common(st, *status);
  st->callback([&cli, status] {
    cli.run = [status] {
      status->o.verbosity = status->verbose;
      return cluster::run_status(status->o, playbooks_for(status->o));
    };
  });
}

}  // namespace hpct::cli
