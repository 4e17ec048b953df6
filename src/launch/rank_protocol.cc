#include "launch/rank_protocol.h"

#include <cstring>
#include <sstream>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "launch/memory_cgroup.h"

namespace hpct::launch {

std::string encode_spec(const RankSpec& s) {
  nlohmann::json j;
  j["rank"] = s.rank;
  j["size"] = s.size;
  nlohmann::json places = nlohmann::json::array();
  for (const auto& p : s.placement) {
    places.push_back({p.host, p.local_rank, p.local_size, p.cross_rank, p.cross_size});
  }
  j["placement"] = places;
  j["argv"] = s.argv;
  j["cwd"] = s.cwd;
  j["env"] = s.env;
  j["secret"] = s.secret;
  j["store_addr"] = s.store_addr;
  j["job_id"] = s.job_id;
  j["restart"] = s.restart;
  j["grace_s"] = s.grace_s;
  if (s.memory_per_rank > 0) j["memory_per_rank"] = s.memory_per_rank;
  if (s.servers > 0) {
    j["servers"] = s.servers;
    j["server_argv"] = s.server_argv;
  }
  return j.dump();
}

RankSpec decode_spec(const std::string& line) {
  RankSpec s;
  try {
    auto j = nlohmann::json::parse(line);
    s.rank = j.at("rank").get<int>();
    s.size = j.at("size").get<int>();
    int r = 0;
    for (const auto& p : j.at("placement")) {
      RankPlacement q;
      q.rank = r++;
      q.host = p.at(0).get<std::string>();
      q.local_rank = p.at(1).get<int>();
      q.local_size = p.at(2).get<int>();
      q.cross_rank = p.at(3).get<int>();
      q.cross_size = p.at(4).get<int>();
      s.placement.push_back(q);
    }
    s.argv = j.at("argv").get<std::vector<std::string>>();
    s.cwd = j.at("cwd").get<std::string>();
    s.env = j.at("env").get<std::map<std::string, std::string>>();
    s.secret = j.at("secret").get<std::string>();
    s.store_addr = j.at("store_addr").get<std::string>();
    s.job_id = j.at("job_id").get<std::string>();
    s.restart = j.at("restart").get<int>();
    s.grace_s = j.at("grace_s").get<double>();
    s.memory_per_rank = j.value("memory_per_rank", std::uint64_t{0});
    s.servers = j.value("servers", 0);
    if (s.servers > 0) s.server_argv = j.at("server_argv").get<std::vector<std::string>>();
  } catch (const nlohmann::json::exception& e) {
    throw_invalid_argument(std::string("the launcher's rank spec is malformed (") + e.what() +
                           "); are launcher and ranks the same hpctrain version?");
  }
  if (s.argv.empty()) throw_invalid_argument("the launcher's rank spec names no program");
  if (s.size < 1 || s.servers < 0 || s.rank >= s.size + s.servers ||
      (!s.placement.empty() && static_cast<int>(s.placement.size()) != s.size + s.servers) ||
      (s.servers > 0 && s.server_argv.empty())) {
    throw_invalid_argument("the launcher's rank spec has an inconsistent rank/size/placement");
  }
  return s;
}

std::string encode_record(int rank, RecordKind kind, const std::string& payload) {
  std::string out = kRecordMarker;
  out += std::to_string(rank);
  out += ' ';
  out += static_cast<char>(kind);
  out += ' ';
  for (char c : payload) out += (c == '\n' || c == '\r') ? ' ' : c;
  out += '\n';
  return out;
}

std::optional<Record> parse_record(const std::string& line) {
  const size_t m = std::strlen(kRecordMarker);
  if (line.compare(0, m, kRecordMarker) != 0) return std::nullopt;
  size_t sp = line.find(' ', m);
  if (sp == std::string::npos || sp == m || sp + 2 > line.size()) return std::nullopt;
  Record r;
  int rank = 0;
  for (size_t i = m; i < sp; ++i) {
    if (line[i] < '0' || line[i] > '9' || rank > (1 << 24)) return std::nullopt;
    rank = rank * 10 + (line[i] - '0');
  }
  r.rank = rank;
  char k = line[sp + 1];
  if (k != 'S' && k != 'O' && k != 'E' && k != 'X') return std::nullopt;
  r.kind = static_cast<RecordKind>(k);
  if (sp + 2 < line.size()) {
    if (line[sp + 2] != ' ') return std::nullopt;
    r.payload = line.substr(sp + 3);
  }
  return r;
}

std::string RankEnd::describe() const {
  if (!error.empty()) return "could not be started: " + error;
  if (oom) {
    std::string s = "was killed by the kernel's out-of-memory killer (signal " + std::to_string(signal) + ")";
    const std::string fix = "; train with --shard 3 (docs/sharding.md), fewer ranks per host, or ";
    if (oom_limit == 0) {
      return s + ": the host ran out of memory (no cgroup limit, cgroup " + oom_cgroup + ")" + fix +
             "a host with more memory";
    }
    s += " at its memory limit of " + describe_limit(oom_limit) + ", cgroup " + oom_cgroup;
    if (oom_limit_from_launch) return s + fix + "a larger --memory-per-rank";
    return s + " (a limit set outside hpctrain: Slurm's, a container's)" + fix + "a larger memory limit";
  }
  if (signal != 0) {
    const char* name = ::strsignal(signal);
    return "was killed by signal " + std::to_string(signal) + (name ? std::string(" (") + name + ")" : "");
  }
  return "exited with code " + std::to_string(exit_code);
}

int RankEnd::launcher_exit_code() const {
  if (!error.empty()) return 127;
  if (signal != 0) return 128 + signal;
  return exit_code;
}

RankEnd parse_rank_end(const std::string& payload) {
  RankEnd e;
  if (payload.rfind("exit ", 0) == 0) {
    e.exit_code = std::atoi(payload.c_str() + 5);
  } else if (payload.rfind("signal ", 0) == 0) {
    e.signal = std::atoi(payload.c_str() + 7);
    // "signal 9 oom LIMIT 0|1 DIR" (the directory last: it may hold spaces).
    std::istringstream rest(payload.substr(7));
    int sig = 0;
    std::string word;
    if (rest >> sig >> word && word == "oom" && rest >> e.oom_limit >> e.oom_limit_from_launch) {
      e.oom = true;
      rest >> std::ws;
      std::getline(rest, e.oom_cgroup);
    }
  } else if (payload.rfind("error ", 0) == 0) {
    e.error = payload.substr(6);
  } else {
    e.error = "unreadable end record '" + payload + "'";
  }
  return e;
}

std::string encode_rank_end(const RankEnd& e) {
  if (!e.error.empty()) return "error " + e.error;
  if (e.signal != 0 && e.oom) {
    return "signal " + std::to_string(e.signal) + " oom " + std::to_string(e.oom_limit) + " " +
           (e.oom_limit_from_launch ? "1 " : "0 ") + e.oom_cgroup;
  }
  if (e.signal != 0) return "signal " + std::to_string(e.signal);
  return "exit " + std::to_string(e.exit_code);
}

}  // namespace hpct::launch
