#include "engine/timeline.h"

#include <cerrno>

#include "core/error.h"

namespace hpct::engine {

std::string json_quote(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\t': out += "\\t"; break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof(buf), "\\u%04x", c);
          out += buf;
        } else {
          out += c;
        }
    }
  }
  return out + "\"";
}

Timeline::Timeline(const std::string& path) : path_(path), origin_(SteadyClock::now()) {
  file_ = std::fopen(path.c_str(), "w");
  if (file_ == nullptr) throw_io("open timeline file " + path + " (HPCT_TIMELINE)", errno);
  std::fputs("{\"displayTimeUnit\":\"ms\",\"traceEvents\":[\n", file_);
}

Timeline::~Timeline() { close(); }

void Timeline::close() {
  if (file_ == nullptr) return;
  std::fputs("\n]}\n", file_);
  std::fclose(file_);
  file_ = nullptr;
}

int Timeline::track(const std::string& tensor) {
  auto it = tracks_.find(tensor);
  if (it != tracks_.end()) return it->second;
  int tid = static_cast<int>(tracks_.size()) + 1;
  tracks_.emplace(tensor, tid);
  std::fprintf(file_, "%s{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":0,\"tid\":%d,\"args\":{\"name\":%s}}",
               first_event_ ? "" : ",\n", tid, json_quote(tensor).c_str());
  first_event_ = false;
  return tid;
}

void Timeline::phase(const std::string& tensor, const char* phase, SteadyClock::time_point start,
                     SteadyClock::time_point end, const std::string& args_json) {
  if (file_ == nullptr) return;
  if (end < start) end = start;
  int tid = track(tensor);
  auto us = [&](SteadyClock::time_point t) {
    return std::chrono::duration<double, std::micro>(t - origin_).count();
  };
  std::fprintf(file_,
               ",\n{\"name\":\"%s\",\"cat\":\"engine\",\"ph\":\"X\",\"pid\":0,\"tid\":%d,"
               "\"ts\":%.3f,\"dur\":%.3f,\"args\":{%s}}",
               phase, tid, us(start), us(end) - us(start), args_json.c_str());
}

}  // namespace hpct::engine
