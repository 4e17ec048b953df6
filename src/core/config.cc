#include "core/config.h"

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <sstream>

#include "core/error.h"

namespace hpct {
namespace {

std::string to_flag_name(const std::string& env_name) {
  std::string s = env_name.substr(5);  // drop HPCT_
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) {
    return c == '_' ? '-' : static_cast<char>(std::tolower(c));
  });
  return s;
}

[[noreturn]] void bad_value(const std::string& name, const std::string& value, const char* want) {
  throw_invalid_argument(name + "=" + value + " is not " + want + "; fix the value or unset " +
                         name + " to use the default");
}

void parse_into(const std::string& name, const std::string& v, double& out) {
  char* end = nullptr;
  errno = 0;
  double d = std::strtod(v.c_str(), &end);
  if (v.empty() || *end != '\0' || errno != 0) bad_value(name, v, "a number");
  out = d;
}

void parse_into(const std::string& name, const std::string& v, std::int64_t& out) {
  char* end = nullptr;
  errno = 0;
  long long n = std::strtoll(v.c_str(), &end, 10);
  if (v.empty() || *end != '\0' || errno != 0) bad_value(name, v, "an integer");
  out = n;
}

void parse_into(const std::string& name, const std::string& v, bool& out) {
  std::string s = v;
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return std::tolower(c); });
  if (s == "1" || s == "true" || s == "yes" || s == "on") {
    out = true;
  } else if (s == "0" || s == "false" || s == "no" || s == "off") {
    out = false;
  } else {
    bad_value(name, v, "a boolean (1/0, true/false, yes/no, on/off)");
  }
}

void parse_into(const std::string&, const std::string& v, std::string& out) { out = v; }

std::string print(double d) {
  std::ostringstream os;
  os << d;
  return os.str();
}
std::string print(std::int64_t n) { return std::to_string(n); }
std::string print(bool b) { return b ? "true" : "false"; }
std::string print(const std::string& s) { return s; }

const char* type_name(double) { return "double"; }
const char* type_name(std::int64_t) { return "int"; }
const char* type_name(bool) { return "bool"; }
const char* type_name(const std::string&) { return "string"; }

size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<size_t> prev(b.size() + 1), cur(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) prev[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    cur[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (a[i - 1] != b[j - 1])});
    }
    std::swap(prev, cur);
  }
  return prev[b.size()];
}

const std::vector<std::string>& declared_names() {
  static const std::vector<std::string> names = {
#define HPCT_CONFIG_NAME(TYPE, FIELD, ENV, DEF, DOC) ENV,
      HPCT_CONFIG_PARAMS(HPCT_CONFIG_NAME)
#undef HPCT_CONFIG_NAME
  };
  return names;
}

bool is_job_variable(const std::string& name) {
#define HPCT_JOB_NAME(env) if (name == env) return true;
  HPCT_JOB_VARIABLES(HPCT_JOB_NAME)
#undef HPCT_JOB_NAME
  return false;
}

}  // namespace

Config Config::from_env(const Env& env) {
  Config c;
  for (const auto& [name, value] : env.with_prefix("HPCT_")) {
    const auto& names = declared_names();
    if (is_job_variable(name)) continue;
    if (std::find(names.begin(), names.end(), name) == names.end()) {
      c.unknown_env.push_back(name);
      continue;
    }
    c.set(name, value, ConfigSource::kEnv);
  }
  return c;
}

void Config::set(const std::string& name, const std::string& value, ConfigSource source) {
  std::string key = name;
  if (key.rfind("--", 0) == 0) key = key.substr(2);
#define HPCT_CONFIG_SET(TYPE, FIELD, ENV, DEF, DOC)   \
  if (key == ENV || key == to_flag_name(ENV)) {       \
    parse_into(ENV, value, FIELD);                    \
    sources[ENV] = source;                            \
    return;                                           \
  }
  HPCT_CONFIG_PARAMS(HPCT_CONFIG_SET)
#undef HPCT_CONFIG_SET
  throw_invalid_argument("unknown setting '" + name +
                         "'; `hpctrain config` lists every setting with its doc");
}

std::vector<ConfigEntry> Config::describe() const {
  std::vector<ConfigEntry> out;
#define HPCT_CONFIG_DESCRIBE(TYPE, FIELD, ENV, DEF, DOC)                         \
  {                                                                              \
    ConfigEntry e;                                                               \
    e.env_name = ENV;                                                            \
    e.flag_name = "--" + to_flag_name(ENV);                                      \
    e.type = type_name(FIELD);                                                   \
    e.value = print(FIELD);                                                      \
    e.default_value = print(static_cast<TYPE>(DEF));                             \
    e.doc = DOC;                                                                 \
    auto it = sources.find(ENV);                                                 \
    e.source = it == sources.end() ? ConfigSource::kDefault : it->second;        \
    out.push_back(std::move(e));                                                 \
  }
  HPCT_CONFIG_PARAMS(HPCT_CONFIG_DESCRIBE)
#undef HPCT_CONFIG_DESCRIBE
  return out;
}

std::vector<std::string> Config::unknown_env_warnings() const {
  std::vector<std::string> out;
  for (const auto& name : unknown_env) {
    std::string best;
    size_t best_d = 4;  // suggest only near misses
    for (const auto& known : declared_names()) {
      size_t d = edit_distance(name, known);
      if (d < best_d) best_d = d, best = known;
    }
    std::string w = name + " is not an hpctrain variable and is ignored";
    if (!best.empty()) w += "; did you mean " + best + "?";
    out.push_back(w);
  }
  return out;
}

}  // namespace hpct
