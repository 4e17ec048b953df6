// Setting up a ShmAllreduce over a communicator's own collectives
// (connect_shm, connect_shm_group) and what makes ranks one host
// (host_identity); the segment and the allreduce are in shm_allreduce.cc.
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <fstream>

#include "comm/shm_allreduce.h"
#include "core/error.h"

namespace hpct::comm {

namespace {

std::string read_first_line(const char* path) {
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);
  return line;
}

// FNV-1a: the same value for the same text in every process and build.
std::int64_t fnv1a(const std::string& text) {
  std::uint64_t h = 1469598103934665603ULL;
  for (unsigned char c : text) {
    h ^= c;
    h *= 1099511628211ULL;
  }
  return static_cast<std::int64_t>(h);
}

}  // namespace

// This host as the ranks see it: kernel boot, network namespace, host name.
std::int64_t host_identity() {
  char ns[128] = {0};
  const ssize_t n = ::readlink("/proc/self/ns/net", ns, sizeof ns - 1);
  char host[256] = {0};
  ::gethostname(host, sizeof host - 1);
  return fnv1a(read_first_line("/proc/sys/kernel/random/boot_id") + "|" +
               std::string(ns, n > 0 ? static_cast<size_t>(n) : 0) + "|" + host);
}

std::unique_ptr<ShmAllreduce> connect_shm_group(Communicator& comm, const std::vector<int>& group,
                                                std::size_t slot_bytes, std::string* off_reason) {
  const int rank = comm.rank();
  const auto me = std::find(group.begin(), group.end(), rank);
  if (me == group.end())
    throw_invalid_argument("connect_shm_group: this rank is not in its own group");
  const int group_rank = static_cast<int>(me - group.begin());
  const int group_size = static_cast<int>(group.size());
  // Each group's first rank makes the segment; every rank's name slot (empty
  // but for those) reaches every rank in one allgather.
  constexpr size_t kName = 96;
  std::vector<char> mine(kName, '\0');
  std::unique_ptr<ShmAllreduce> shm;
  std::string reason;
  if (group_rank == 0) {
    try {
      shm = ShmAllreduce::create(group_size, slot_bytes);
      std::snprintf(mine.data(), kName, "%s", shm->name().c_str());
    } catch (const Error& e) {
      reason = e.what();
    }
  }
  std::vector<char> names(kName * static_cast<size_t>(comm.size()));
  AllgatherOptions g;
  g.input = mine.data();
  g.output = names.data();
  g.count = kName;
  g.dtype = DataType::kUInt8;
  allgather(comm, g);
  const char* leader_name = names.data() + kName * static_cast<size_t>(group[0]);
  if (group_rank != 0 && leader_name[0] != '\0') {
    try {
      shm = ShmAllreduce::open(std::string(leader_name, strnlen(leader_name, kName)), group_rank,
                               group_size, slot_bytes);
    } catch (const Error& e) {
      reason = e.what();
    }
  }
  // Every group gets a segment or none does: the callers' paths must agree.
  std::int32_t ok = shm ? 1 : 0;
  AllreduceOptions a;
  a.output = &ok;
  a.count = 1;
  a.dtype = DataType::kInt32;
  a.op = ReduceOp::kMin;
  allreduce(comm, a);
  if (shm && group_rank == 0) shm->unlink();  // every rank that could map it has
  if (ok == 0) {
    *off_reason = reason.empty() ? "another rank could not map its segment" : reason;
    return nullptr;
  }
  const std::vector<std::int64_t> pids = allgather_value(comm, ::getpid());
  std::vector<pid_t> group_pids;
  for (int r : group) group_pids.push_back(static_cast<pid_t>(pids[static_cast<size_t>(r)]));
  shm->set_pids(group_pids);
  return shm;
}

std::unique_ptr<ShmAllreduce> connect_shm(Communicator& comm, std::size_t slot_bytes,
                                          std::string* off_reason) {
  const int size = comm.size();
  if (size < 2) return nullptr;
  const std::int64_t mine = host_identity();
  const std::vector<std::int64_t> ids = allgather_value(comm, mine);
  int local = 0;
  for (auto id : ids) local += id == mine ? 1 : 0;
  if (local != size) {
    *off_reason = "the ranks span hosts (" + std::to_string(local) + " of " + std::to_string(size) +
                  " on this one)";
    return nullptr;
  }
  std::vector<int> everyone(static_cast<size_t>(size));
  for (int r = 0; r < size; ++r) everyone[static_cast<size_t>(r)] = r;
  return connect_shm_group(comm, everyone, slot_bytes, off_reason);
}

}  // namespace hpct::comm
