#include "doctor/render.h"

#include <algorithm>
#include <cstdio>

namespace hpct::doctor {
namespace {

bool about(const Row& row, const std::string& host) {
  if (row.hosts.size() == 1) return row.hosts[0] == host;
  return row.hosts.size() == 2 && row.hosts[1] == host;
}

const char* mark(Status s) {
  switch (s) {
    case Status::kOk: return "ok";
    case Status::kWarn: return "warn";
    case Status::kFail: return "FAIL";
    case Status::kSkip: return "-";
  }
  return "?";
}

std::string pad(const std::string& s, size_t w) { return s.size() >= w ? s + " " : s + std::string(w - s.size(), ' '); }

std::string hosts_of(const Row& row) {
  return row.hosts.size() == 2 ? row.hosts[0] + " -> " + row.hosts[1] : row.hosts.at(0);
}

}  // namespace

std::string cell_mark(const Report& r, const std::string& host, const std::string& check) {
  bool any = false;
  Status s = Status::kSkip;
  for (const auto& row : r.rows) {
    if (row.check != check || !about(row, host)) continue;
    any = true;
    s = worst(s, row.status);
  }
  return any ? mark(s) : "-";
}

std::string render_table(const Report& r) {
  std::string out;
  size_t hw = 6;
  for (const auto& h : r.hosts) hw = std::max(hw, h.size() + 2);
  std::string header = pad("host", hw);
  for (const auto& c : r.columns) header += pad(c, std::max<size_t>(c.size() + 2, 6));
  while (!header.empty() && header.back() == ' ') header.pop_back();
  out += header + "\n";
  for (const auto& h : r.hosts) {
    std::string line = pad(h, hw);
    for (const auto& c : r.columns) line += pad(cell_mark(r, h, c), std::max<size_t>(c.size() + 2, 6));
    while (!line.empty() && line.back() == ' ') line.pop_back();
    out += line + "\n";
  }
  if (r.hosts.size() > 1) {
    std::string head = pad("", hw);
    for (const auto& h : r.hosts) head += pad(h, hw);
    while (!head.empty() && head.back() == ' ') head.pop_back();
    out += "\nports " + r.ports + " (from row to column):\n" + head + "\n";
    for (const auto& from : r.hosts) {
      std::string line = pad(from, hw);
      for (const auto& to : r.hosts) {
        std::string m = "-";
        for (const auto& row : r.rows) {
          if (row.check == "ports" && row.hosts.size() == 2 && row.hosts[0] == from && row.hosts[1] == to) {
            m = mark(row.status);
          }
        }
        line += pad(from == to ? "" : m, hw);
      }
      while (!line.empty() && line.back() == ' ') line.pop_back();
      out += line + "\n";
    }
  }
  for (const auto& m : r.matrices) {
    std::string head = pad("", hw);
    for (const auto& h : r.hosts) head += pad(h, hw);
    while (!head.empty() && head.back() == ' ') head.pop_back();
    out += "\n" + m.name + " (" + m.unit + ", from row to column):\n" + head + "\n";
    for (size_t i = 0; i < r.hosts.size() && i < m.values.size(); ++i) {
      std::string line = pad(r.hosts[i], hw);
      for (size_t j = 0; j < r.hosts.size() && j < m.values[i].size(); ++j) {
        char buf[32];
        if (m.values[i][j] < 0) std::snprintf(buf, sizeof buf, "%s", i == j ? "" : "-");
        else std::snprintf(buf, sizeof buf, m.values[i][j] >= 100 ? "%.0f" : "%.2f", m.values[i][j]);
        line += pad(buf, hw);
      }
      while (!line.empty() && line.back() == ' ') line.pop_back();
      out += line + "\n";
    }
  }
  if (!r.facts.empty()) {
    out += "\n";
    for (const auto& f : r.facts) out += f + "\n";
  }
  int fails = 0, warns = 0;
  std::string problems;
  for (const auto& row : r.rows) {
    if (row.status != Status::kFail && row.status != Status::kWarn) continue;
    (row.status == Status::kFail ? fails : warns)++;
    problems += std::string(row.status == Status::kFail ? "FAIL " : "warn ") + hosts_of(row) + " " +
                row.check + ": " + row.detail + "\n";
    if (!row.fix.empty()) problems += "     fix: " + row.fix + "\n";
  }
  if (!problems.empty()) out += "\n" + problems;
  char tail[160];
  std::snprintf(tail, sizeof tail, "\n%s: %zu host(s), %d failure(s), %d warning(s), %.1f s%s\n",
                fails == 0 ? "READY" : "NOT READY", r.hosts.size(), fails, warns, r.elapsed_s,
                r.quick ? " (--quick)" : "");
  out += tail;
  return out;
}

nlohmann::json render_json(const Report& r) {
  nlohmann::json cells = nlohmann::json::object();
  for (const auto& h : r.hosts) {
    nlohmann::json c = nlohmann::json::object();
    for (const auto& col : r.columns) {
      std::string m = cell_mark(r, h, col);
      c[col] = m == "FAIL" ? "fail" : m == "-" ? "skip" : m;
    }
    cells[h] = c;
  }
  nlohmann::json rows = nlohmann::json::array();
  for (const auto& row : r.rows) {
    rows.push_back({{"hosts", row.hosts}, {"check", row.check}, {"status", status_name(row.status)},
                    {"detail", row.detail}, {"fix", row.fix}});
  }
  nlohmann::json matrices = nlohmann::json::object();
  for (const auto& m : r.matrices) {
    nlohmann::json values = nlohmann::json::array();
    for (const auto& line : m.values) {
      nlohmann::json l = nlohmann::json::array();
      for (double v : line) l.push_back(v < 0 ? nlohmann::json(nullptr) : nlohmann::json(v));
      values.push_back(l);
    }
    matrices[m.name] = {{"unit", m.unit}, {"values", values}};
  }
  return {{"ready", r.ready()}, {"exit_code", r.exit_code()}, {"quick", r.quick},
          {"elapsed_s", r.elapsed_s}, {"ports", r.ports}, {"hosts", r.hosts},
          {"checks", r.columns}, {"cells", cells}, {"rows", rows}, {"facts", r.facts},
          {"matrices", matrices}};
}

}  // namespace hpct::doctor
