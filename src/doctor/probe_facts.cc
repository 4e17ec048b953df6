// Step 1 of the probe (probe.h): what this host is. Every piece is read from
// the OS here, on the host being checked, because that is where a rank will
// run: its PATH, its /etc/hosts, its libblas.so.3.
#include <limits.h>
#include <poll.h>
#include <pwd.h>
#include <sched.h>
#include <signal.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <openssl/evp.h>

#include "core/clock.h"
#include "core/env.h"
#include "core/error.h"
#include "core/subprocess.h"
#include "doctor/blas.h"
#include "doctor/capture.h"
#include "doctor/packages.h"
#include "doctor/mpi_version.h"
#include "doctor/net.h"
#include "doctor/probe.h"
#include "launch/child_process.h"
#include "launch/hostfile.h"

namespace hpct::doctor {
namespace {

std::string user_name() {
  passwd pw{};
  passwd* found = nullptr;
  char buf[4096];
  if (::getpwuid_r(::geteuid(), &pw, buf, sizeof buf, &found) == 0 && found != nullptr) {
    return pw.pw_name;
  }
  return "uid " + std::to_string(::geteuid());
}

std::string host_name() {
  char buf[256] = {};
  if (::gethostname(buf, sizeof buf - 1) != 0) return "";
  return buf;
}

// The /etc/hosts line that maps one of `names` to a loopback address, as
// written (the line a user has to change), or "".
std::string loopback_hosts_line(const std::vector<std::string>& names) {
  std::ifstream f("/etc/hosts");
  std::string line;
  while (std::getline(f, line)) {
    std::string body = line.substr(0, line.find('#'));
    std::istringstream words(body);
    std::string addr, word;
    if (!(words >> addr) || !is_loopback_address(addr)) continue;
    while (words >> word) {
      for (const auto& n : names) {
        if (!n.empty() && n != "localhost" && word == n) return body.substr(0, body.find_last_not_of(" \t") + 1);
      }
    }
  }
  return "";
}

int usable_cores() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (::sched_getaffinity(0, sizeof set, &set) == 0) return CPU_COUNT(&set);
  return static_cast<int>(::sysconf(_SC_NPROCESSORS_ONLN));
}

void read_meminfo(std::uint64_t* total, std::uint64_t* available) {
  std::ifstream f("/proc/meminfo");
  std::string key;
  std::uint64_t kb;
  std::string unit;
  while (f >> key >> kb) {
    std::getline(f, unit);
    if (key == "MemTotal:") *total = kb * 1024;
    if (key == "MemAvailable:") *available = kb * 1024;
  }
}

// mpirun as this host's PATH finds it: where, which implementation, which version.
MpiFacts find_mpi(const Env& env) {
  MpiFacts m;
  std::string path = env.get("PATH").value_or("/usr/local/bin:/usr/bin:/bin");
  std::istringstream dirs(path);
  std::string dir;
  while (std::getline(dirs, dir, ':')) {
    if (dir.empty()) continue;
    std::string cand = dir + "/mpirun";
    if (::access(cand.c_str(), X_OK) == 0) {
      m.path = cand;
      break;
    }
  }
  if (m.path.empty()) {
    m.error = "no mpirun in PATH (" + path + ")";
    return m;
  }
  char buf[PATH_MAX];
  m.resolved = ::realpath(m.path.c_str(), buf) ? buf : m.path;
  Captured c = capture_command({m.path, "--version"}, Millis(3000));
  const std::string& out = c.out;
  if (!c.finished) {
    m.error = m.path + " --version did not answer within 3 s";
    return m;
  }
  m.found = true;
  parse_mpirun_version(out, m);
  if (m.implementation == "unknown") {
    m.error = "unrecognised `mpirun --version`: " + out.substr(0, 120);
  }
  return m;
}

void write_token(const ProbeOptions& o, HostFacts& f) {
  f.shared_dir = o.shared_dir;
  if (o.shared_dir.empty()) return;
  std::string path = token_path(o.shared_dir, o.run_id, o.index);
  std::string tmp = path + ".tmp";
  std::FILE* file = std::fopen(tmp.c_str(), "w");
  if (file == nullptr) {
    f.token_error = "cannot write " + tmp + ": " + std::strerror(errno);
    return;
  }
  std::string text = token_text(o.run_id, o.index);
  bool ok = std::fwrite(text.data(), 1, text.size(), file) == text.size();
  ok = std::fflush(file) == 0 && ::fsync(::fileno(file)) == 0 && ok;
  std::fclose(file);
  // Rename so a reader never sees a half-written token.
  if (!ok || std::rename(tmp.c_str(), path.c_str()) != 0) {
    f.token_error = "cannot write " + path + ": " + std::strerror(errno);
    std::remove(tmp.c_str());
    return;
  }
  f.token_written = true;
}

}  // namespace

namespace {

std::string to_hex(const unsigned char* bytes, unsigned len) {
  std::string hex;
  char two[3];
  for (unsigned i = 0; i < len; ++i) {
    std::snprintf(two, sizeof two, "%02x", bytes[i]);
    hex += two;
  }
  return hex;
}

}  // namespace

std::string file_sha256(const std::string& path) {
  std::FILE* file = std::fopen(path.c_str(), "rb");
  if (file == nullptr) throw_io("open " + path, errno);
  EVP_MD_CTX* ctx = EVP_MD_CTX_new();
  EVP_DigestInit_ex(ctx, EVP_sha256(), nullptr);
  char buf[1 << 16];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, file)) > 0) EVP_DigestUpdate(ctx, buf, n);
  bool failed = std::ferror(file) != 0;
  std::fclose(file);
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned len = 0;
  EVP_DigestFinal_ex(ctx, md, &len);
  EVP_MD_CTX_free(ctx);
  if (failed) throw_io("read " + path, EIO);
  return to_hex(md, len);
}

std::string build_sha256(const std::string& exe) {
  const std::string mine = file_sha256(exe);
  const std::string sibling = (std::filesystem::path(exe).parent_path() / "hpctrain-torch").string();
  std::error_code ec;
  const std::string torch_half =
      std::filesystem::exists(sibling, ec) ? file_sha256(sibling) : std::string("no hpctrain-torch");
  const std::string both = mine + " " + torch_half;
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned len = 0;
  EVP_Digest(both.data(), both.size(), md, &len, EVP_sha256(), nullptr);
  return to_hex(md, len);
}

HeadFacts local_head_facts(const std::string& version, const std::string& git) {
  HeadFacts h;
  h.version = version;
  h.git = git;
  h.exe = self_executable();
  h.build_sha256 = build_sha256(h.exe);
  h.user = user_name();
  h.uid = static_cast<int>(::geteuid());
  h.gid = static_cast<int>(::getegid());
  return h;
}

HostFacts collect_host_facts(const ProbeOptions& o) {
  ProcessEnv env;
  HostFacts f;
  f.version = o.version;
  f.git = o.git;
  f.exe = self_executable();
  f.build_sha256 = build_sha256(f.exe);
  f.user = user_name();
  f.uid = static_cast<int>(::geteuid());
  f.gid = static_cast<int>(::getegid());
  f.packages = installed_packages();
  f.hostname = host_name();
  std::string ignored;
  if (!f.hostname.empty()) f.hostname_addrs = resolve_ipv4(f.hostname, &ignored);
  if (!o.listed_name.empty()) f.listed_addrs = resolve_ipv4(o.listed_name, &ignored);
  f.loopback_hosts_line = loopback_hosts_line({f.hostname, o.listed_name});
  for (const auto& a : launch::LocalIdentity::current().addresses) {
    if (!is_loopback_address(a)) f.interface_addrs.push_back(a);
  }
  f.cores = usable_cores();
  read_meminfo(&f.mem_total, &f.mem_available);
  f.disk_path = !o.shared_dir.empty() ? o.shared_dir : env.get("HOME").value_or("/");
  struct statvfs vfs;
  if (::statvfs(f.disk_path.c_str(), &vfs) == 0) {
    f.disk_free = static_cast<std::uint64_t>(vfs.f_bavail) * vfs.f_frsize;
  }
  f.mpi = find_mpi(env);
  f.blas = find_blas();
  f.gpu = find_gpus();
  write_token(o, f);
  f.time_ns = unix_ns();
  return f;
}

}  // namespace hpct::doctor
