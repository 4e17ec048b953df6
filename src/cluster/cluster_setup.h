// `hpctrain cluster setup` and `cluster status`, start to end: read the
// hostfile, write the inventory into the state folder, run the playbooks
// (bounded in time), report per host what failed and how to fix it, and
// finish with `hpctrain doctor` run on the cluster as the training user.
//
// The state folder (default "<hostfile>.cluster", mode 0700) holds all that
// setup keeps on the machine it runs on: the inventory, the cluster's ssh
// key, the known host keys, the munge key, Ansible's own files and the last
// run's summary. Nothing else on that machine is changed unless it is
// listed in the hostfile.
#pragma once

#include <string>

#include "cluster/setup_options.h"

namespace hpct::cluster {

// Returns the exit code: 0 when the playbooks finished on every host and
// doctor passed every check (for a dry run: when it finished), 1 otherwise.
// InvalidArgument for bad options, Timeout when the run outlives
// o.timeout_s. Blocks; prints to stdout.
int run_setup(const SetupOptions& o, const std::string& playbooks);

// What setup manages, host by host (a check-mode run: "ok" or "drift" per
// step), then doctor. Reads the options setup recorded in the state folder;
// o gives the hostfile, the state folder, the key and the verbosity.
// 0 when nothing drifted and doctor passed.
int run_status(const SetupOptions& o, const std::string& playbooks);

}  // namespace hpct::cluster
