#include "data/source/shard_list.h"

#include <algorithm>
#include <cstdlib>
#include <sstream>

#include "core/error.h"
#include "data/formats/shard_toc.h"

namespace hpct::data {
namespace {

bool parse_int(const std::string& s, long long* v) {
  if (s.empty()) return false;
  char* end = nullptr;
  *v = std::strtoll(s.c_str(), &end, 10);
  return *end == '\0';
}

std::vector<std::string> alternatives(const std::string& body, const std::string& pattern) {
  size_t dots = body.find("..");
  if (dots != std::string::npos && body.find(',') == std::string::npos) {
    const std::string lo_s = body.substr(0, dots), hi_s = body.substr(dots + 2);
    long long lo, hi;
    if (!parse_int(lo_s, &lo) || !parse_int(hi_s, &hi)) {
      throw_invalid_argument("shard pattern '" + pattern + "': {" + body +
                             "} is not a range of two integers");
    }
    if (hi - lo > 10'000'000 || lo - hi > 10'000'000) {
      throw_invalid_argument("shard pattern '" + pattern + "': range {" + body + "} is too long");
    }
    const size_t width = lo_s.size();
    std::vector<std::string> out;
    const long long step = lo <= hi ? 1 : -1;
    for (long long v = lo;; v += step) {
      std::string s = std::to_string(v < 0 ? -v : v);
      if (s.size() < width - (v < 0 ? 1 : 0)) s.insert(0, width - (v < 0 ? 1 : 0) - s.size(), '0');
      out.push_back((v < 0 ? "-" : "") + s);
      if (v == hi) break;
    }
    return out;
  }
  std::vector<std::string> out;
  std::string cur;
  for (char c : body) {
    if (c == ',') {
      out.push_back(cur);
      cur.clear();
    } else {
      cur.push_back(c);
    }
  }
  out.push_back(cur);
  return out;
}

}  // namespace

std::vector<std::string> expand_braces(const std::string& pattern) {
  size_t open = pattern.find('{');
  if (open == std::string::npos) {
    if (pattern.find('}') != std::string::npos) {
      throw_invalid_argument("shard pattern '" + pattern + "': '}' without '{'");
    }
    return {pattern};
  }
  size_t close = pattern.find('}', open);
  if (close == std::string::npos) {
    throw_invalid_argument("shard pattern '" + pattern + "': '{' without '}'");
  }
  if (pattern.find('{', open + 1) < close) {
    throw_invalid_argument("shard pattern '" + pattern + "': nested braces are not supported");
  }
  const std::string head = pattern.substr(0, open);
  std::vector<std::string> out;
  for (const auto& alt : alternatives(pattern.substr(open + 1, close - open - 1), pattern)) {
    for (auto& rest : expand_braces(pattern.substr(close + 1))) out.push_back(head + alt + rest);
  }
  return out;
}

std::vector<std::string> expand_shard_list(const std::vector<std::string>& items, FileSystem& fs) {
  std::vector<std::string> out;
  for (const auto& item : items) {
    if (item.rfind("tcp://", 0) == 0) {
      out.push_back(item);
    } else if (!item.empty() && item[0] == '@') {
      std::istringstream in(read_whole_file(fs, item.substr(1)));
      std::string line;
      while (std::getline(in, line)) {
        while (!line.empty() && (line.back() == '\r' || line.back() == ' ')) line.pop_back();
        size_t b = line.find_first_not_of(" \t");
        if (b == std::string::npos || line[b] == '#') continue;
        for (auto& s : expand_braces(line.substr(b))) out.push_back(s);
      }
    } else {
      for (auto& s : expand_braces(item)) {
        if (s.find_first_of("*?") == std::string::npos) {
          out.push_back(s);
          continue;
        }
        auto matched = fs.glob(s);
        // A shard's sidecar index (formats/shard_toc.h) is not a shard.
        matched.erase(std::remove_if(matched.begin(), matched.end(), is_toc_path), matched.end());
        if (matched.empty()) throw_invalid_argument("shard pattern '" + s + "' matches nothing");
        out.insert(out.end(), matched.begin(), matched.end());
      }
    }
  }
  return out;
}

bool parse_tcp_source(const std::string& source, std::string* host, int* port) {
  if (source.rfind("tcp://", 0) != 0) return false;
  std::string rest = source.substr(6);
  size_t colon = rest.rfind(':');
  long long p = 0;
  if (colon == std::string::npos || !parse_int(rest.substr(colon + 1), &p) || p <= 0 || p > 65535) {
    throw_invalid_argument("data source '" + source + "': expected tcp://host:port");
  }
  *host = rest.substr(0, colon);
  if (host->size() > 2 && host->front() == '[' && host->back() == ']') *host = host->substr(1, host->size() - 2);
  *port = static_cast<int>(p);
  return true;
}

}  // namespace hpct::data
