#include "metrics/exposition.h"

#include <cctype>
#include <cmath>
#include <cstdlib>
#include <limits>

#include "core/error.h"

namespace hpct::metrics {
namespace {

bool name_start(char c) {
  return std::isalpha(static_cast<unsigned char>(c)) || c == '_' || c == ':';
}
bool name_char(char c) { return name_start(c) || std::isdigit(static_cast<unsigned char>(c)); }

[[noreturn]] void bad(int line_no, const std::string& line, const std::string& what) {
  throw_data_corrupt("metrics text, line " + std::to_string(line_no) + ": " + what + " in '" +
                     line.substr(0, 120) + "'");
}

double parse_value(const std::string& v, int line_no, const std::string& line) {
  if (v == "+Inf" || v == "Inf") return std::numeric_limits<double>::infinity();
  if (v == "-Inf") return -std::numeric_limits<double>::infinity();
  if (v == "NaN") return std::numeric_limits<double>::quiet_NaN();
  char* end = nullptr;
  double d = std::strtod(v.c_str(), &end);
  if (v.empty() || end != v.c_str() + v.size() || std::isnan(d) || std::isinf(d)) {
    bad(line_no, line, "'" + v + "' is not a number");
  }
  return d;
}

Sample parse_line(const std::string& line, int line_no) {
  Sample s;
  size_t i = 0;
  if (!name_start(line[0])) bad(line_no, line, "no metric name");
  while (i < line.size() && name_char(line[i])) ++i;
  s.name = line.substr(0, i);
  if (i < line.size() && line[i] == '{') {
    ++i;
    while (true) {
      while (i < line.size() && (line[i] == ' ' || line[i] == ',')) ++i;
      if (i < line.size() && line[i] == '}') {
        ++i;
        break;
      }
      size_t k = i;
      while (i < line.size() && name_char(line[i])) ++i;
      if (i == k || i + 1 >= line.size() || line[i] != '=' || line[i + 1] != '"') {
        bad(line_no, line, "a label is not name=\"value\"");
      }
      std::string key = line.substr(k, i - k), value;
      i += 2;
      while (i < line.size() && line[i] != '"') {
        if (line[i] == '\\' && i + 1 < line.size()) {
          ++i;
          value += line[i] == 'n' ? '\n' : line[i];
        } else {
          value += line[i];
        }
        ++i;
      }
      if (i >= line.size()) bad(line_no, line, "a label value has no closing quote");
      ++i;
      s.labels[key] = value;
    }
  }
  while (i < line.size() && (line[i] == ' ' || line[i] == '\t')) ++i;
  size_t v = i;
  while (i < line.size() && line[i] != ' ' && line[i] != '\t') ++i;
  if (v == i) bad(line_no, line, "no value");
  s.value = parse_value(line.substr(v, i - v), line_no, line);
  // An optional timestamp follows; nothing else may.
  while (i < line.size() && (line[i] == ' ' || line[i] == '\t')) ++i;
  if (i < line.size()) {
    size_t t = i;
    if (line[t] == '-') ++t;
    while (t < line.size() && std::isdigit(static_cast<unsigned char>(line[t]))) ++t;
    if (t == i || t != line.size())
      bad(line_no, line, "text after the value that is not a timestamp");
  }
  return s;
}

}  // namespace

std::vector<Sample> parse_exposition(const std::string& text) {
  std::vector<Sample> out;
  size_t start = 0;
  int line_no = 0;
  while (start < text.size()) {
    size_t end = text.find('\n', start);
    if (end == std::string::npos) end = text.size();
    std::string line = text.substr(start, end - start);
    start = end + 1;
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    size_t first = line.find_first_not_of(" \t");
    if (first == std::string::npos || line[first] == '#') continue;
    out.push_back(parse_line(line.substr(first), line_no));
  }
  return out;
}

const Sample* Exposition::find(const std::string& name,
                               const std::map<std::string, std::string>& match) const {
  for (const auto& s : samples_) {
    if (s.name != name) continue;
    bool all = true;
    for (const auto& [k, v] : match) {
      auto it = s.labels.find(k);
      if (it == s.labels.end() || it->second != v) {
        all = false;
        break;
      }
    }
    if (all) return &s;
  }
  return nullptr;
}

double Exposition::value(const std::string& name, const std::map<std::string, std::string>& match,
                         double fallback) const {
  const Sample* s = find(name, match);
  return s ? s->value : fallback;
}

std::vector<const Sample*> Exposition::all(const std::string& name) const {
  std::vector<const Sample*> out;
  for (const auto& s : samples_) {
    if (s.name == name) out.push_back(&s);
  }
  return out;
}

}  // namespace hpct::metrics
