// Hostfiles and -H host lists: which hosts a job may use and how many ranks
// (slots) each takes.
//
// Accepted forms, one host per line, as the two launchers users know write
// them: OpenMPI `host slots=4 [max_slots=8]`, Horovod `host:4`, a bare `host`
// (one slot); `#` starts a comment; blank lines are skipped. A host listed
// twice gets the sum of its slots (as mpirun does). Errors name the file and
// line. Pure functions; thread-safe.
#pragma once

#include <string>
#include <vector>

namespace hpct::launch {

struct HostEntry {
  std::string name;    // as written: a name or an IPv4 address
  int slots = 1;       // ranks this host may take
  std::string origin;  // "hosts.txt:3" or "-H", for messages
};

// Parses hostfile text; filename only names the origin in entries and errors.
// InvalidArgument "hosts.txt:3: ..." on a malformed line, or when the file
// lists no host at all.
std::vector<HostEntry> parse_hostfile_text(const std::string& text, const std::string& filename);

// Reads and parses a hostfile. Io naming the path when it cannot be read.
std::vector<HostEntry> parse_hostfile(const std::string& path);

// "host1:2,host2:2,host3" (-H). InvalidArgument naming the bad item.
std::vector<HostEntry> parse_host_list(const std::string& spec);

// What "this machine" is called: its host names and the addresses of its
// interfaces. Injectable so tests need not depend on the machine they run on.
struct LocalIdentity {
  std::vector<std::string> names;      // gethostname() and its short form
  std::vector<std::string> addresses;  // IPv4 addresses of every interface
  static LocalIdentity current();
};

// True for localhost, loopback addresses, this machine's names and any name
// or address that resolves to one of its interface addresses. Such hosts are
// started with fork/exec, never ssh. May block on name resolution.
bool is_local_host(const std::string& name, const LocalIdentity& self);

// The IPv4 address of a local interface (eth0). InvalidArgument naming the
// interface and the ones that exist when it has none.
std::string interface_address(const std::string& interface);

}  // namespace hpct::launch
