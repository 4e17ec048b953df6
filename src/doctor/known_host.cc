#include "doctor/known_host.h"

#include <pwd.h>
#include <sys/stat.h>
#include <unistd.h>

#include <sstream>

#include "doctor/capture.h"

namespace hpct::doctor {
namespace {

std::string home_dir() {
  passwd pw{};
  passwd* found = nullptr;
  char buf[4096];
  if (::getpwuid_r(::geteuid(), &pw, buf, sizeof buf, &found) == 0 && found != nullptr) return pw.pw_dir;
  return "/";
}

}  // namespace

KnownHost parse_ssh_dump(const std::string& text, const std::string& home) {
  KnownHost k;
  std::istringstream in(text);
  std::string line, hostname, alias;
  int port = 22;
  while (std::getline(in, line)) {
    std::istringstream words(line);
    std::string key;
    words >> key;
    if (key == "stricthostkeychecking") {
      words >> k.strict;
    } else if (key == "userknownhostsfile" || key == "globalknownhostsfile") {
      for (std::string f; words >> f;) {
        if (f.rfind("~/", 0) == 0) f = home + f.substr(1);
        k.files.push_back(f);
      }
    } else if (key == "hostname") {
      words >> hostname;
    } else if (key == "hostkeyalias") {
      words >> alias;
    } else if (key == "port") {
      words >> port;
    }
  }
  k.lookup = alias.empty() ? hostname : alias;
  if (port != 22 && alias.empty()) k.lookup = "[" + k.lookup + "]:" + std::to_string(port);
  return k;
}

KnownHost look_up_known_host(const std::vector<std::string>& ssh_prefix, const std::string& host) {
  std::vector<std::string> argv = ssh_prefix;
  argv.push_back("-G");
  argv.push_back(host);
  Captured dump = capture_command(argv, Millis(2000));
  if (!dump.finished || dump.exit_code != 0) {
    KnownHost k;
    k.error = "ssh -G " + host + " failed: " + dump.out.substr(0, 200);
    return k;
  }
  KnownHost k = parse_ssh_dump(dump.out, home_dir());
  k.checked = true;
  for (const auto& f : k.files) {
    struct stat st{};
    if (f == "/dev/null" || ::stat(f.c_str(), &st) != 0) continue;
    Captured found = capture_command({"ssh-keygen", "-F", k.lookup, "-f", f}, Millis(2000));
    if (found.finished && found.exit_code == 0 && found.out.find(" ") != std::string::npos) {
      k.found_in = f;
      break;
    }
  }
  return k;
}

}  // namespace hpct::doctor
