// The head's view of a host's ssh key: what StrictHostKeyChecking ssh will
// use with doctor's options (from `ssh -G`, which applies ~/.ssh/config and
// every -o) and which known_hosts file lists the host (`ssh-keygen -F`,
// which also matches hashed entries). Doctor's known-host column fails when
// keys are not checked (StrictHostKeyChecking=no) or no file lists the host.
#pragma once

#include <string>
#include <vector>

#include "doctor/facts.h"

namespace hpct::doctor {

// Parses `ssh -G` output: stricthostkeychecking, the user and global
// known_hosts files (a leading ~ replaced by home), and the name ssh looks
// up (hostkeyalias, else hostname; "[name]:port" when the port is not 22).
KnownHost parse_ssh_dump(const std::string& text, const std::string& home);

// Runs `ssh_prefix... -G host`, then `ssh-keygen -F NAME -f FILE` for each
// existing file until one lists it. Blocks up to about 2 s per command.
KnownHost look_up_known_host(const std::vector<std::string>& ssh_prefix, const std::string& host);

}  // namespace hpct::doctor
