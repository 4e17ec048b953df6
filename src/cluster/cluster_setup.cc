#include "cluster/cluster_setup.h"

#include <sys/stat.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "cluster/ansible_run.h"
#include "cluster/auto_bundle.h"
#include "cluster/inventory.h"
#include "cluster/run_summary.h"
#include "core/error.h"
#include "core/file.h"
#include "core/subprocess.h"
#include "doctor/net.h"

namespace hpct::cluster {
namespace {

namespace fs = std::filesystem;

void write_file(const std::string& path, const std::string& text) {
  std::string tmp = path + ".tmp";
  {
    std::ofstream f(tmp, std::ios::trunc);
    if (!f) throw_io("write " + tmp, errno);
    f << text;
    if (!f.flush()) throw_io("write " + tmp, errno);
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) throw_io("rename " + tmp, errno);
}

void make_state_dir(const std::string& dir) {
  std::error_code ec;
  fs::create_directories(dir + "/ansible/tmp", ec);
  fs::create_directories(dir + "/ansible/cp", ec);
  if (ec) throw_io("create the state folder " + dir, ec.value());
  ::chmod(dir.c_str(), 0700);
}

nlohmann::json saved_options(const SetupOptions& o) {
  std::string packages = o.packages.name();
  if (o.packages.kind == PackageSource::Kind::kProxy && !o.packages.proxy_url.empty()) {
    packages += ":" + o.packages.proxy_url;
  }
  // A bundle setup made itself is made again (when stale) by status and the next setup.
  if (o.packages.kind == PackageSource::Kind::kBundle && !o.packages.made_by_setup) {
    packages += ":" + o.packages.bundle_dir;
  }
  return {{"identity", o.identity}, {"ssh_user", o.ssh_user}, {"ssh_port", o.ssh_port},
          {"user", o.user},         {"uid", o.uid},           {"shared_dir", o.shared_dir},
          {"shared_from", o.shared_from}, {"shared_type", o.shared_type}, {"slurm", o.slurm},
          {"packages", packages},   {"deb", o.deb},           {"scratch_dir", o.scratch_dir},
          {"scratch_type", o.scratch_type}, {"scratch_size", o.scratch_size}, {"scratch_ram", o.scratch_ram}};
}

// The hosts, resolved, with the inventory written into the state folder.
std::vector<InventoryHost> prepare(const SetupOptions& o, const std::string& state) {
  auto entries = launch::parse_hostfile(o.hostfile);
  validate(o, entries);
  auto hosts = inventory_hosts(entries, doctor::resolve_ipv4, launch::LocalIdentity::current());
  std::string proxy;
  if (o.packages.kind == PackageSource::Kind::kProxy) {
    proxy = o.packages.proxy_url.empty() ? "http://" + head_address_toward(hosts[0].address) + ":3142"
                                         : o.packages.proxy_url;
  }
  make_state_dir(state);
  write_file(state + "/inventory.json", inventory_json(hosts, o, state, proxy).dump(2) + "\n");
  return hosts;
}

// Runs the playbooks; the summary, or an error naming what went wrong.
RunSummary run_playbooks(const SetupOptions& o, RunMode mode, const std::string& playbooks,
                         const std::string& state, size_t host_count, int* exit_code) {
  PlaybookCommand cmd = playbook_command(o, mode, playbooks, state, host_count);
  std::remove(cmd.summary_file.c_str());
  std::cout << std::flush;
  SubprocessResult r = run_subprocess(cmd.argv, cmd.env, seconds_to_millis(o.timeout_s));
  if (r.timed_out) {
    throw_timeout("the playbooks did not finish within " + std::to_string(static_cast<int>(o.timeout_s)) +
                  " s (--timeout); the lines above show the last step on each host; run again with -v for "
                  "Ansible's own output");
  }
  *exit_code = r.signal != 0 ? 128 + r.signal : r.exit_code;
  std::string text = read_file_or_empty(cmd.summary_file);
  if (text.empty()) {
    throw_io("ansible-playbook exited with " + std::to_string(*exit_code) + " and wrote no summary (" +
                 cmd.summary_file + "); run `" + join_command(cmd.argv) + "` with ANSIBLE_CONFIG=" + playbooks +
                 "/ansible.cfg to see why",
             EIO);
  }
  return parse_run_summary(text, cmd.summary_file);
}

std::vector<std::string> names_of(const std::vector<InventoryHost>& hosts) {
  std::vector<std::string> n;
  for (const auto& h : hosts) n.push_back(h.name);
  return n;
}

// doctor on the first host that finished, as the training user.
int run_doctor_on_cluster(const SetupOptions& o, const std::vector<InventoryHost>& hosts,
                          const RunSummary& s, const std::string& state) {
  const InventoryHost* on = nullptr;
  for (const auto& h : hosts) {
    const HostRun* r = s.find(h.name);
    if (r != nullptr && r->ok()) {
      on = &h;
      break;
    }
  }
  if (on == nullptr) {
    std::cout << "doctor: no host finished setup to run it on\n";
    return 1;
  }
  int result = 0;
  for (const auto& dir : doctor_dirs(o)) {
    std::cout << "\nhpctrain doctor on " << on->name << " as " << o.user
              << (dir.empty() ? std::string() : ", " + dir + " shared by every host") << ":\n"
              << std::flush;
    auto argv = doctor_command(o, *on, state, dir);
    SubprocessResult r = run_subprocess(argv, {}, Millis(180000));
    if (r.timed_out) {
      std::cout << "doctor did not answer within 180 s: run `" << join_command(argv) << "` to see why\n";
      return 1;
    }
    if (r.exit_code == 255) {
      std::cout << "cannot log in to " << on->name << " as " << o.user << " with the cluster key (" << state
                << "/id_ed25519): fix: run setup again, or `" << join_command(argv) << "` to see ssh's error\n";
      return 1;
    }
    if (r.signal != 0 || r.exit_code != 0) result = 1;
  }
  return result;
}

}  // namespace

int run_setup(const SetupOptions& given, const std::string& playbooks) {
  SetupOptions o = given;
  const std::string state = state_dir_for(o);
  auto t0 = std::chrono::steady_clock::now();
  if (o.packages.kind == PackageSource::Kind::kBundle && o.packages.bundle_dir.empty()) {
    validate(o, launch::parse_hostfile(o.hostfile));  // before minutes of bundling
    make_state_dir(state);
    o.packages.made_by_setup = true;
    o.packages.bundle_dir = make_auto_bundle(o, playbooks, state);
  }
  auto hosts = prepare(o, state);
  write_file(state + "/cluster.json", saved_options(o).dump(2) + "\n");
  std::string names;
  for (const auto& h : hosts) names += (names.empty() ? "" : ", ") + h.name;
  std::cout << "hpctrain cluster setup" << (o.dry_run ? " --dry-run" : "") << ": " << hosts.size() << " hosts ("
            << names << "), user " << o.user << ", packages " << o.packages.name()
            << (o.shared_dir.empty() ? "" : ", shared " + o.shared_dir)
            << (o.scratch_dir.empty() ? "" : ", scratch " + o.scratch_dir + " (" + o.scratch_type +
                                                 (o.scratch_ram ? " on RAM bricks" : "") + ")")
            << (o.slurm ? ", Slurm" : "")
            << "; state in " << state << "\n";
  int code = 0;
  RunSummary s = run_playbooks(o, o.dry_run ? RunMode::kDryRun : RunMode::kSetup, playbooks, state,
                               hosts.size(), &code);
  double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (!s.all_ok() || code != 0) {
    std::cout << "\ncluster setup did not finish everywhere (" << took << " s):\n"
              << describe_failures(s, names_of(hosts));
    return 1;
  }
  char line[160];
  if (o.dry_run) {
    std::snprintf(line, sizeof line, "\ndry run: %d step(s) would change something (listed above); nothing was changed (%.1f s)\n",
                  s.total_changed(), took);
    std::cout << line;
    return 0;
  }
  std::snprintf(line, sizeof line, "\nsetup finished on every host in %.1f s, %d step(s) changed something\n", took,
                s.total_changed());
  std::cout << line;
  if (!o.scratch_dir.empty() && o.scratch_ram) {
    std::cout << o.scratch_dir << " is scratch: its files are spread over the hosts' memory; a host that restarts "
              << "loses the files placed on it. Keep what matters elsewhere.\n";
  }
  return run_doctor_on_cluster(o, hosts, s, state);
}

int run_status(const SetupOptions& given, const std::string& playbooks) {
  const std::string state = state_dir_for(given);
  std::string text = read_file_or_empty(state + "/cluster.json");
  if (text.empty()) {
    throw_invalid_argument("no setup recorded in " + state + ": run hpctrain cluster setup --hostfile " +
                           given.hostfile + " first (or give its --state-dir)");
  }
  SetupOptions o = given;
  try {
    auto j = nlohmann::json::parse(text);
    if (o.identity.empty()) o.identity = j.value("identity", "");
    o.ssh_user = j.value("ssh_user", "root");
    o.ssh_port = j.value("ssh_port", 0);
    o.user = j.value("user", "hpctrain");
    o.uid = j.value("uid", 0);
    o.shared_dir = j.value("shared_dir", "");
    o.shared_from = j.value("shared_from", "");
    o.shared_type = j.value("shared_type", "auto");
    o.slurm = j.value("slurm", false);
    o.packages = parse_package_source(j.value("packages", "online"));
    if (o.packages.kind == PackageSource::Kind::kBundle && o.packages.bundle_dir.empty()) {
      o.packages.made_by_setup = true;  // status checks against the bundle setup made; it does not remake it
      o.packages.bundle_dir = state + "/bundle";
    }
    o.deb = j.value("deb", "");
    o.scratch_dir = j.value("scratch_dir", "");
    o.scratch_type = j.value("scratch_type", "glusterfs");
    o.scratch_size = j.value("scratch_size", "");
    o.scratch_ram = j.value("scratch_ram", false);
  } catch (const nlohmann::json::exception& e) {
    throw_data_corrupt(state + "/cluster.json: " + e.what());
  }
  auto hosts = prepare(o, state);
  std::cout << "hpctrain cluster status: what setup manages, host by host (drift: a step would change something)\n";
  int code = 0;
  RunSummary s = run_playbooks(o, RunMode::kStatus, playbooks, state, hosts.size(), &code);
  int result = s.all_ok() && code == 0 && s.total_changed() == 0 ? 0 : 1;
  if (!s.all_ok()) std::cout << describe_failures(s, names_of(hosts));
  if (run_doctor_on_cluster(o, hosts, s, state) != 0) result = 1;
  return result;
}

}  // namespace hpct::cluster
