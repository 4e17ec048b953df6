// The timeline: a Chrome-trace JSON file (chrome://tracing, ui.perfetto.dev)
// of every tensor's phases in the engine, written by rank 0 when
// HPCT_TIMELINE names a file.
//
// One track (tid) per tensor name, named by a thread_name metadata event; one
// complete event ("ph":"X") per phase: queued (submitted, not yet reported to
// the coordinator), negotiated (reported, waiting for every rank), fused
// (copied into the fusion buffer), communicated (the collective), done
// (copied back, handle completed). The file is a JSON object
// {"traceEvents":[...]} that is valid once close() (or the destructor) has
// written its end; events are streamed through a buffered FILE so a long run
// does not hold them in memory.
//
// Not thread-safe: the engine's background thread is its only writer.
#pragma once

#include <cstdio>
#include <string>
#include <unordered_map>

#include "core/clock.h"

namespace hpct::engine {

class Timeline {
 public:
  // Creates or truncates path; Io naming the file when it cannot.
  explicit Timeline(const std::string& path);
  ~Timeline();
  Timeline(const Timeline&) = delete;
  Timeline& operator=(const Timeline&) = delete;

  // One phase of one tensor; end before start is clamped to an empty event.
  void phase(const std::string& tensor, const char* phase, SteadyClock::time_point start,
             SteadyClock::time_point end, const std::string& args_json = "");
  // Writes the end of the JSON and closes the file; later phases are dropped.
  void close();
  const std::string& path() const { return path_; }

 private:
  int track(const std::string& tensor);

  std::string path_;
  std::FILE* file_ = nullptr;
  SteadyClock::time_point origin_;
  std::unordered_map<std::string, int> tracks_;
  bool first_event_ = true;
};

// s as a JSON string literal, quotes included.
std::string json_quote(const std::string& s);

}  // namespace hpct::engine
