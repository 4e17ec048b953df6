// `cluster setup --packages bundle` without a folder: setup makes the bundle
// itself, on the machine it runs on, from what its roles will install
// (package_features: sshfs or NFS, Slurm, GlusterFS) plus hpctrain's .deb,
// with scripts/package-bundle.sh, into STATE/bundle. Kept between runs: it
// is made again only when its inputs change (the .deb, a feature it lacks, the
// script; not this machine's apt lists: remove STATE/bundle for newer
// versions of the other packages). Blocks; not thread-safe with itself
// for one state folder.
#pragma once

#include <string>
#include <vector>

#include "cluster/setup_options.h"

namespace hpct::cluster {

// package-bundle.sh beside the playbooks: <playbooks>/../../scripts (the
// source tree's deploy/ansible) or <playbooks>/../scripts (the .deb's
// /usr/share/hpctrain/ansible). InvalidArgument naming both when neither.
std::string find_bundle_script(const std::string& playbooks);

// bash SCRIPT DIR --deb DEB --for FEATURE...
std::vector<std::string> bundle_command(const SetupOptions& o, const std::vector<std::string>& features,
                                        const std::string& script, const std::string& dir);

// What the bundle is made from besides its features, one line: a changed
// line means a new bundle.
std::string bundle_inputs(const SetupOptions& o, const std::string& script);

// The features a bundle must hold: `wanted`, plus those the current bundle
// already holds (a run with fewer options reuses it; features never flip).
std::vector<std::string> bundle_features(const std::vector<std::string>& wanted,
                                         const std::vector<std::string>& held);

// Makes or refreshes STATE/bundle (a line saying which, with the script's
// summary) and returns its path. Io naming the script's last lines when it
// fails; Timeout after 15 minutes.
std::string make_auto_bundle(const SetupOptions& o, const std::string& playbooks, const std::string& state_dir);

}  // namespace hpct::cluster
