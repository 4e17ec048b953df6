#include "launch/elastic_protocol.h"

#include <algorithm>
#include <map>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/regex.h"

namespace hpct::launch::elastic {

const Member* Generation::find(std::int64_t id) const {
  for (const auto& m : members) {
    if (m.id == id) return &m;
  }
  return nullptr;
}

std::string encode_generation(const Generation& g) {
  nlohmann::json j;
  j["gen"] = g.gen;
  j["reason"] = g.reason;
  j["members"] = nlohmann::json::array();
  for (const auto& m : g.members) {
    j["members"].push_back({{"id", m.id},
                            {"host", m.host},
                            {"rank", m.rank},
                            {"local_rank", m.local_rank},
                            {"local_size", m.local_size},
                            {"cross_rank", m.cross_rank},
                            {"cross_size", m.cross_size}});
  }
  return j.dump();
}

Generation decode_generation(const std::string& text) {
  Generation g;
  try {
    auto j = nlohmann::json::parse(text);
    g.gen = j.at("gen").get<std::int64_t>();
    g.reason = j.at("reason").get<std::string>();
    for (const auto& m : j.at("members")) {
      Member x;
      x.id = m.at("id").get<std::int64_t>();
      x.host = m.at("host").get<std::string>();
      x.rank = m.at("rank").get<int>();
      x.local_rank = m.at("local_rank").get<int>();
      x.local_size = m.at("local_size").get<int>();
      x.cross_rank = m.at("cross_rank").get<int>();
      x.cross_size = m.at("cross_size").get<int>();
      g.members.push_back(x);
    }
  } catch (const nlohmann::json::exception& e) {
    throw_invalid_argument(std::string("elastic generation record is not valid: ") + e.what());
  }
  for (size_t r = 0; r < g.members.size(); ++r) {
    if (g.members[r].rank != static_cast<int>(r)) {
      throw_invalid_argument("elastic generation " + std::to_string(g.gen) + ": member " +
                             std::to_string(r) + " has rank " + std::to_string(g.members[r].rank));
    }
  }
  return g;
}

std::string encode_report(const FailureReport& r) {
  nlohmann::json j;
  j["gen"] = r.gen;
  j["id"] = r.id;
  j["rank"] = r.rank;
  j["blamed"] = r.blamed;
  j["message"] = r.message;
  return j.dump();
}

FailureReport decode_report(const std::string& text) {
  FailureReport r;
  try {
    auto j = nlohmann::json::parse(text);
    r.gen = j.at("gen").get<std::int64_t>();
    r.id = j.at("id").get<std::int64_t>();
    r.rank = j.at("rank").get<int>();
    r.blamed = j.at("blamed").get<std::vector<int>>();
    r.message = j.at("message").get<std::string>();
  } catch (const nlohmann::json::exception& e) {
    throw_invalid_argument(std::string("elastic failure report is not valid: ") + e.what());
  }
  return r;
}

std::vector<int> blamed_ranks(const std::string& message) {
  // The first statement of blame wins: later ones repeat what other ranks saw.
  static const Regex one(R"(peer rank (\d+)|(?:^|[^\w])rank (\d+) \(pid|shut down by rank (\d+))");
  static const Regex many(R"((?:peer ranks|rank\(s\)) \[([0-9, ]+)\])");
  static const Regex num(R"(\d+)");
  const auto m1 = one.search(message);
  const auto m2 = many.search(message);
  std::vector<int> out;
  if (m2 && (!m1 || m2->position < m1->position)) {
    for (const auto& n : num.search_all(m2->group(1))) out.push_back(std::stoi(n.group(0)));
  } else if (m1) {
    for (size_t g = 1; g < m1->groups.size(); ++g) {
      if (m1->groups[g]) {
        out.push_back(std::stoi(*m1->groups[g]));
        break;
      }
    }
  }
  return out;
}

std::vector<Member> assign_ranks(std::vector<Candidate> workers) {
  std::sort(workers.begin(), workers.end(), [](const Candidate& a, const Candidate& b) {
    return a.joined_gen != b.joined_gen ? a.joined_gen < b.joined_gen : a.id < b.id;
  });
  // Hosts in the order of their longest-serving worker.
  std::vector<std::string> hosts;
  std::map<std::string, std::vector<const Candidate*>> by_host;
  for (const auto& w : workers) {
    if (by_host.count(w.host) == 0) hosts.push_back(w.host);
    by_host[w.host].push_back(&w);
  }
  std::vector<Member> out;
  for (size_t h = 0; h < hosts.size(); ++h) {
    const auto& ws = by_host[hosts[h]];
    for (size_t l = 0; l < ws.size(); ++l) {
      Member m;
      m.id = ws[l]->id;
      m.host = hosts[h];
      m.rank = static_cast<int>(out.size());
      m.local_rank = static_cast<int>(l);
      m.local_size = static_cast<int>(ws.size());
      m.cross_rank = static_cast<int>(h);
      m.cross_size = static_cast<int>(hosts.size());
      out.push_back(m);
    }
  }
  return out;
}

}  // namespace hpct::launch::elastic
