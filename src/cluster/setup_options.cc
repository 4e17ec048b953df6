#include "cluster/setup_options.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <climits>
#include <cstdlib>

#include "core/error.h"

namespace hpct::cluster {
namespace {

bool exists(const std::string& path) {
  struct stat st{};
  return ::stat(path.c_str(), &st) == 0;
}

bool is_dir(const std::string& path) {
  struct stat st{};
  return ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

std::string absolute(const std::string& path) {
  if (path.empty() || path[0] == '/') return path;
  char buf[PATH_MAX];
  if (::getcwd(buf, sizeof buf) == nullptr) return path;
  return std::string(buf) + "/" + path;
}

// A POSIX user name as useradd takes it.
bool valid_user_name(const std::string& u) {
  if (u.empty() || u.size() > 32) return false;
  if (!(std::islower(static_cast<unsigned char>(u[0])) || u[0] == '_')) return false;
  return std::all_of(u.begin(), u.end(), [](unsigned char c) {
    return std::islower(c) || std::isdigit(c) || c == '_' || c == '-';
  });
}

// Paths end up in fstab, exports and shell lines on every host.
bool plain_path(const std::string& p) {
  return std::all_of(p.begin(), p.end(), [](unsigned char c) {
    return std::isalnum(c) || c == '/' || c == '_' || c == '-' || c == '.';
  });
}

}  // namespace

const char* PackageSource::name() const {
  switch (kind) {
    case Kind::kOnline: return "online";
    case Kind::kProxy: return "proxy";
    case Kind::kBundle: return "bundle";
  }
  return "?";
}

PackageSource parse_package_source(const std::string& text) {
  PackageSource s;
  const std::string forms = "online, proxy, proxy:http://HOST:PORT, bundle or bundle:DIR";
  if (text == "online") return s;
  if (text == "proxy" || text.rfind("proxy:", 0) == 0) {
    s.kind = PackageSource::Kind::kProxy;
    if (text.size() > 6) {
      s.proxy_url = text.substr(6);
      if (s.proxy_url.rfind("http://", 0) != 0) {
        throw_invalid_argument("--packages " + text + ": the proxy is an http:// URL, e.g. proxy:http://10.0.0.254:3142");
      }
    }
    return s;
  }
  if (text == "bundle") {  // made by setup itself, in the state folder
    s.kind = PackageSource::Kind::kBundle;
    return s;
  }
  if (text.rfind("bundle:", 0) == 0) {
    s.kind = PackageSource::Kind::kBundle;
    s.bundle_dir = absolute(text.substr(7));
    while (s.bundle_dir.size() > 1 && s.bundle_dir.back() == '/') s.bundle_dir.pop_back();
    if (text.size() == 7 || !is_dir(s.bundle_dir)) {
      throw_invalid_argument("--packages " + text + ": no such folder; make one with scripts/package-bundle.sh DIR");
    }
    if (!exists(s.bundle_dir + "/Packages") && !exists(s.bundle_dir + "/Packages.gz")) {
      throw_invalid_argument("--packages " + text + ": " + s.bundle_dir +
                             " has no Packages index; make the bundle with scripts/package-bundle.sh DIR");
    }
    if (!plain_path(s.bundle_dir)) {
      throw_invalid_argument("--packages " + text + ": use a folder path of letters, digits and / _ - . only");
    }
    return s;
  }
  throw_invalid_argument("--packages " + text + ": choose " + forms);
}

void validate(const SetupOptions& o, const std::vector<launch::HostEntry>& hosts) {
  if (hosts.empty()) throw_invalid_argument("--hostfile " + o.hostfile + " lists no host");
  if (!valid_user_name(o.user) || o.user == "root") {
    throw_invalid_argument("--user " + o.user +
                           ": give a user name of lower-case letters, digits, _ and - (not root), e.g. --user alice");
  }
  if (!valid_user_name(o.ssh_user)) {
    throw_invalid_argument("--ssh-user " + o.ssh_user + " is not a user name");
  }
  if (o.uid != 0 && (o.uid < 1000 || o.uid > 59999)) {
    throw_invalid_argument("--uid " + std::to_string(o.uid) +
                           ": give an id from 1000 to 59999 (below are system accounts), or leave it out");
  }
  if (!o.identity.empty() && !exists(o.identity)) {
    throw_invalid_argument("-i " + o.identity + ": no such key file");
  }
  if (o.shared_dir.empty()) {
    if (!o.shared_from.empty() || o.shared_type != "auto") {
      throw_invalid_argument("--shared-from and --shared-type need --shared-dir, e.g. --shared-dir /shared");
    }
  } else {
    if (o.shared_dir[0] != '/' || o.shared_dir == "/" || !plain_path(o.shared_dir)) {
      throw_invalid_argument("--shared-dir " + o.shared_dir +
                             ": give an absolute path of letters, digits and / _ - . (not /), e.g. /shared");
    }
    if (o.shared_type != "auto" && o.shared_type != "nfs" && o.shared_type != "sshfs" &&
        o.shared_type != "existing") {
      throw_invalid_argument("--shared-type " + o.shared_type + ": choose nfs, sshfs or existing (default: auto)");
    }
    if (!o.shared_from.empty()) {
      bool listed = std::any_of(hosts.begin(), hosts.end(),
                                [&](const launch::HostEntry& h) { return h.name == o.shared_from; });
      if (!listed) {
        throw_invalid_argument("--shared-from " + o.shared_from + " is not in " + o.hostfile +
                               "; name one of its hosts as written there");
      }
    }
  }
  if (!o.scratch_dir.empty()) {
    if (o.scratch_dir[0] != '/' || o.scratch_dir == "/" || !plain_path(o.scratch_dir)) {
      throw_invalid_argument("--scratch-dir " + o.scratch_dir +
                             ": give an absolute path of letters, digits and / _ - . (not /), e.g. /mnt/parallel");
    }
    if (o.scratch_dir == o.shared_dir) {
      throw_invalid_argument("--scratch-dir " + o.scratch_dir + " is also --shared-dir: give them different paths");
    }
    if (o.scratch_type != "glusterfs") {
      throw_invalid_argument("--scratch-type " + o.scratch_type + ": choose glusterfs (the only one packaged in Debian)");
    }
    if (!o.scratch_size.empty()) {
      size_t digits = 0;
      while (digits < o.scratch_size.size() && std::isdigit(static_cast<unsigned char>(o.scratch_size[digits]))) {
        ++digits;
      }
      std::string unit = o.scratch_size.substr(digits);
      if (digits == 0 || !(unit.empty() || unit == "k" || unit == "K" || unit == "m" || unit == "M" || unit == "g" ||
                           unit == "G" || unit == "%")) {
        throw_invalid_argument("--scratch-size " + o.scratch_size +
                               ": give a size as tmpfs takes it, e.g. 4G, 512M or 25% (of each host's memory)");
      }
      if (!o.scratch_ram) {
        throw_invalid_argument("--scratch-size " + o.scratch_size +
                               " sizes RAM bricks: add --scratch-ram (a directory brick takes what its disk has)");
      }
    }
  } else if (o.scratch_ram || !o.scratch_size.empty() || o.scratch_type != "glusterfs") {
    throw_invalid_argument("--scratch-type, --scratch-size and --scratch-ram need --scratch-dir, e.g. --scratch-dir /mnt/parallel");
  }
  if (o.packages.kind == PackageSource::Kind::kBundle && o.packages.bundle_dir.empty()) {
    if (o.deb.empty()) {
      throw_invalid_argument("--packages bundle makes a bundle of hpctrain's .deb and what the roles install: give "
                             "--deb FILE (make package writes build/hpctrain_VERSION_ARCH.deb), or use --packages bundle:DIR");
    }
    if (!exists(o.deb) || o.deb.size() < 5 || o.deb.substr(o.deb.size() - 4) != ".deb") {
      throw_invalid_argument("--deb " + o.deb + ": no such .deb file; build it with make package");
    }
  }
  if (o.packages.kind != PackageSource::Kind::kBundle) {
    if (o.deb.empty()) {
      throw_invalid_argument(std::string("--packages ") + o.packages.name() +
                             " installs hpctrain from its .deb: give --deb FILE (make package writes "
                             "build/hpctrain_VERSION_ARCH.deb), or use --packages bundle:DIR");
    }
    if (!exists(o.deb) || o.deb.size() < 5 || o.deb.substr(o.deb.size() - 4) != ".deb") {
      throw_invalid_argument("--deb " + o.deb + ": no such .deb file; build it with make package");
    }
  }
  if (o.forks < 0) throw_invalid_argument("--forks must be at least 1");
  if (o.timeout_s <= 0) throw_invalid_argument("--timeout must be positive");
}

std::string state_dir_for(const SetupOptions& o) {
  if (!o.state_dir.empty()) return absolute(o.state_dir);
  return absolute(o.hostfile) + ".cluster";
}

std::vector<std::string> package_features(const SetupOptions& o) {
  std::vector<std::string> f;
  if (!o.shared_dir.empty()) {
    if (o.shared_type == "sshfs" || o.shared_type == "auto") f.push_back("sshfs");
    if (o.shared_type == "nfs" || o.shared_type == "auto") f.push_back("nfs");
  }
  if (o.slurm) f.push_back("slurm");
  if (!o.scratch_dir.empty()) f.push_back(o.scratch_type);
  return f;
}

}  // namespace hpct::cluster
