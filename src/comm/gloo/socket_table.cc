#include "comm/gloo/socket_table.h"

#include <dirent.h>
#include <unistd.h>

#include <climits>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <set>
#include <sstream>

namespace hpct::comm {
namespace {

constexpr int kTcpEstablished = 1;

// "0100007F:A1B2" -> "[127.0.0.1]:41394". The address is the 32-bit value as
// the kernel holds it (network byte order) printed as a host-order integer.
bool format_address(const std::string& hex, std::string* out) {
  const size_t colon = hex.find(':');
  if (colon != 8 || hex.size() != 13) return false;
  char* end = nullptr;
  const unsigned long ip = std::strtoul(hex.substr(0, 8).c_str(), &end, 16);
  if (*end != '\0') return false;
  const unsigned long port = std::strtoul(hex.substr(9).c_str(), &end, 16);
  if (*end != '\0') return false;
  char buf[40];
  std::snprintf(buf, sizeof buf, "[%lu.%lu.%lu.%lu]:%lu", ip & 0xff, (ip >> 8) & 0xff,
                (ip >> 16) & 0xff, (ip >> 24) & 0xff, port);
  *out = buf;
  return true;
}

std::set<unsigned long> socket_inodes_of_this_process() {
  std::set<unsigned long> inodes;
  DIR* dir = ::opendir("/proc/self/fd");
  if (dir == nullptr) return inodes;
  while (dirent* e = ::readdir(dir)) {
    char link[PATH_MAX];
    const std::string path = std::string("/proc/self/fd/") + e->d_name;
    const ssize_t n = ::readlink(path.c_str(), link, sizeof link - 1);
    if (n <= 0) continue;
    link[n] = '\0';
    unsigned long inode = 0;
    if (std::sscanf(link, "socket:[%lu]", &inode) == 1) inodes.insert(inode);
  }
  ::closedir(dir);
  return inodes;
}

}  // namespace

bool parse_proc_tcp_line(const std::string& line, TcpConnection* out, unsigned long* inode,
                         int* state) {
  std::istringstream is(line);
  std::string slot, local, remote, st, queues, timer, retrans, uid, timeout;
  if (!(is >> slot >> local >> remote >> st >> queues >> timer >> retrans >> uid >> timeout >>
        *inode)) {
    return false;
  }
  if (slot.empty() || slot.back() != ':') return false;
  char* end = nullptr;
  *state = static_cast<int>(std::strtol(st.c_str(), &end, 16));
  if (*end != '\0') return false;
  return format_address(local, &out->local) && format_address(remote, &out->remote);
}

std::vector<TcpConnection> established_tcp_connections() {
  std::vector<TcpConnection> out;
  const auto mine = socket_inodes_of_this_process();
  std::ifstream in("/proc/self/net/tcp");
  std::string line;
  while (std::getline(in, line)) {
    TcpConnection c;
    unsigned long inode = 0;
    int state = 0;
    if (!parse_proc_tcp_line(line, &c, &inode, &state)) continue;
    if (state == kTcpEstablished && mine.count(inode) != 0) out.push_back(c);
  }
  return out;
}

}  // namespace hpct::comm
