#include "launch/hostfile.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netdb.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include "core/error.h"

namespace hpct::launch {
namespace {

std::string trim(const std::string& s) {
  size_t b = s.find_first_not_of(" \t\r");
  if (b == std::string::npos) return "";
  size_t e = s.find_last_not_of(" \t\r");
  return s.substr(b, e - b + 1);
}

// A positive slot count or InvalidArgument naming where it came from.
int parse_slots(const std::string& text, const std::string& where) {
  char* end = nullptr;
  errno = 0;
  long n = std::strtol(text.c_str(), &end, 10);
  if (text.empty() || *end != '\0' || errno != 0 || n < 1 || n > 4096) {
    throw_invalid_argument(where + ": '" + text + "' is not a slot count (a whole number 1..4096)");
  }
  return static_cast<int>(n);
}

bool valid_host_name(const std::string& h) {
  if (h.empty() || h.size() > 253) return false;
  return std::all_of(h.begin(), h.end(), [](unsigned char c) {
    return std::isalnum(c) || c == '-' || c == '.' || c == '_';
  });
}

void add_entry(std::vector<HostEntry>& out, HostEntry e) {
  for (auto& have : out) {
    if (have.name == e.name) {
      have.slots += e.slots;
      return;
    }
  }
  out.push_back(std::move(e));
}

// One host item: "host", "host:4", "host slots=4 max_slots=8".
HostEntry parse_item(const std::string& item, const std::string& where) {
  std::istringstream words(item);
  std::string first;
  words >> first;
  HostEntry e;
  e.origin = where;
  auto colon = first.find(':');
  if (colon != std::string::npos) {
    e.name = first.substr(0, colon);
    e.slots = parse_slots(first.substr(colon + 1), where);
  } else {
    e.name = first;
  }
  if (!valid_host_name(e.name)) {
    throw_invalid_argument(where + ": '" + e.name + "' is not a host name or IPv4 address");
  }
  std::string word;
  while (words >> word) {
    auto eq = word.find('=');
    std::string key = word.substr(0, eq);
    if (eq == std::string::npos || (key != "slots" && key != "max_slots" && key != "max-slots")) {
      throw_invalid_argument(where + ": unexpected '" + word +
                             "'; write 'host slots=N' (OpenMPI) or 'host:N' (Horovod)");
    }
    int n = parse_slots(word.substr(eq + 1), where);
    if (key == "slots") {
      if (colon != std::string::npos) {
        throw_invalid_argument(where + ": slots given twice ('" + first + "' and '" + word + "')");
      }
      e.slots = n;
    }
  }
  return e;
}

}  // namespace

std::vector<HostEntry> parse_hostfile_text(const std::string& text, const std::string& filename) {
  std::vector<HostEntry> out;
  std::istringstream in(text);
  std::string line;
  int number = 0;
  while (std::getline(in, line)) {
    ++number;
    auto hash = line.find('#');
    if (hash != std::string::npos) line.resize(hash);
    line = trim(line);
    if (line.empty()) continue;
    add_entry(out, parse_item(line, filename + ":" + std::to_string(number)));
  }
  if (out.empty()) throw_invalid_argument(filename + ": lists no host");
  return out;
}

std::vector<HostEntry> parse_hostfile(const std::string& path) {
  std::ifstream f(path);
  if (!f) throw_io("cannot read hostfile " + path, errno);
  std::stringstream ss;
  ss << f.rdbuf();
  return parse_hostfile_text(ss.str(), path);
}

std::vector<HostEntry> parse_host_list(const std::string& spec) {
  std::vector<HostEntry> out;
  size_t pos = 0;
  while (pos <= spec.size()) {
    size_t comma = spec.find(',', pos);
    if (comma == std::string::npos) comma = spec.size();
    std::string item = trim(spec.substr(pos, comma - pos));
    if (item.empty() || item.find_first_of(" \t") != std::string::npos) {
      throw_invalid_argument("-H " + spec + ": item '" + item + "' is not host or host:slots");
    }
    add_entry(out, parse_item(item, "-H " + item));
    pos = comma + 1;
  }
  return out;
}

LocalIdentity LocalIdentity::current() {
  LocalIdentity id;
  char buf[256] = {};
  if (::gethostname(buf, sizeof buf - 1) == 0 && buf[0] != '\0') {
    std::string name = buf;
    id.names.push_back(name);
    auto dot = name.find('.');
    if (dot != std::string::npos) id.names.push_back(name.substr(0, dot));
  }
  ifaddrs* list = nullptr;
  if (::getifaddrs(&list) == 0) {
    for (ifaddrs* a = list; a != nullptr; a = a->ifa_next) {
      if (a->ifa_addr == nullptr || a->ifa_addr->sa_family != AF_INET) continue;
      char text[INET_ADDRSTRLEN];
      auto* sin = reinterpret_cast<sockaddr_in*>(a->ifa_addr);
      if (inet_ntop(AF_INET, &sin->sin_addr, text, sizeof text)) id.addresses.push_back(text);
    }
    ::freeifaddrs(list);
  }
  return id;
}

bool is_local_host(const std::string& name, const LocalIdentity& self) {
  if (name == "localhost" || name.rfind("127.", 0) == 0 || name == "::1") return true;
  if (std::find(self.names.begin(), self.names.end(), name) != self.names.end()) return true;
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  if (::getaddrinfo(name.c_str(), nullptr, &hints, &res) != 0) return false;
  bool local = false;
  for (addrinfo* a = res; a != nullptr && !local; a = a->ai_next) {
    char text[INET_ADDRSTRLEN];
    auto* sin = reinterpret_cast<sockaddr_in*>(a->ai_addr);
    if (!inet_ntop(AF_INET, &sin->sin_addr, text, sizeof text)) continue;
    std::string addr = text;
    local = addr.rfind("127.", 0) == 0 ||
            std::find(self.addresses.begin(), self.addresses.end(), addr) != self.addresses.end();
  }
  ::freeaddrinfo(res);
  return local;
}

std::string interface_address(const std::string& interface) {
  ifaddrs* list = nullptr;
  if (::getifaddrs(&list) != 0) throw_io("getifaddrs", errno);
  std::string found, names;
  for (ifaddrs* a = list; a != nullptr; a = a->ifa_next) {
    if (a->ifa_addr == nullptr || a->ifa_addr->sa_family != AF_INET) continue;
    if (names.find(std::string(a->ifa_name) + " ") == std::string::npos) {
      names += std::string(a->ifa_name) + " ";
    }
    if (interface == a->ifa_name && found.empty()) {
      char text[INET_ADDRSTRLEN];
      auto* sin = reinterpret_cast<sockaddr_in*>(a->ifa_addr);
      if (inet_ntop(AF_INET, &sin->sin_addr, text, sizeof text)) found = text;
    }
  }
  ::freeifaddrs(list);
  if (found.empty()) {
    throw_invalid_argument("network interface '" + interface +
                           "' has no IPv4 address here; interfaces with one: " + trim(names));
  }
  return found;
}

}  // namespace hpct::launch
