// The Debian packages doctor compares across hosts (hpctrain itself, the
// MPI, BLAS, Gloo and libtorch runtimes it loads), read from dpkg's status
// file on each host. Pure parsing; thread-safe.
#pragma once

#include <map>
#include <string>

namespace hpct::doctor {

// True for the packages doctor reports: hpctrain, openmpi-bin, libopenmpi3,
// libopenblas0-pthread, libgloo0 and libtorch<version> (libtorch1.13).
bool tracked_package(const std::string& name);

// name -> version of the tracked packages installed ("install ok installed")
// in dpkg's status file text.
std::map<std::string, std::string> parse_dpkg_status(const std::string& text);

// The same for this host's /var/lib/dpkg/status (empty when there is none).
std::map<std::string, std::string> installed_packages();

}  // namespace hpct::doctor
