// Reading a job's flight records (flight_merge.h) from its directory.
#include <dirent.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/file.h"
#include "why/flight_merge.h"

namespace hpct::why {
namespace {

template <typename T>
T get_or(const nlohmann::json& j, const char* key, T fallback) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return fallback;
  return it->get<T>();
}

Op parse_op(const nlohmann::json& e) {
  Op o;
  o.seq = get_or<std::uint64_t>(e, "seq", 0);
  o.name = get_or<std::string>(e, "name", "");
  o.op = get_or<std::string>(e, "op", "");
  o.reduce = get_or<std::string>(e, "reduce", "");
  o.dtype = get_or<std::string>(e, "dtype", "");
  o.state = get_or<std::string>(e, "state", "");
  o.path = get_or<std::string>(e, "path", "");
  o.site = get_or<std::string>(e, "site", "");
  o.stack = get_or<std::string>(e, "stack", "");
  o.shape = get_or<std::vector<std::int64_t>>(e, "shape", {});
  o.bytes = get_or<std::uint64_t>(e, "bytes", 0);
  o.submitted_us = get_or<std::int64_t>(e, "submitted_us", 0);
  o.ended_us = get_or<std::int64_t>(e, "ended_us", 0);
  return o;
}

}  // namespace

RankRecord parse_rank_record(const std::string& text, const std::string& what) {
  try {
    const auto j = nlohmann::json::parse(text);
    if (get_or<std::string>(j, "format", "") != "hpctrain-flight-record/1") {
      throw_data_corrupt(what + " is not an hpctrain flight record (no format hpctrain-flight-record/1)");
    }
    RankRecord r;
    r.rank = j.at("rank").get<int>();
    r.host = get_or<std::string>(j, "host", "");
    r.reason = get_or<std::string>(j, "reason", "");
    r.first_error = get_or<std::string>(j, "first_error", "");
    r.last_error = get_or<std::string>(j, "last_error", "");
    r.written_us = get_or<std::int64_t>(j, "written_unix_us", 0);
    if (auto p = j.find("phase"); p != j.end()) {
      r.phase = get_or<std::string>(*p, "name", "none");
      r.phase_since_us = get_or<std::int64_t>(*p, "since_unix_us", 0);
      r.step = get_or<std::int64_t>(*p, "step", -1);
    }
    for (const auto& e : j.at("entries")) r.ops.push_back(parse_op(e));
    return r;
  } catch (const nlohmann::json::exception& e) {
    throw_data_corrupt(what + " is not a readable flight record: " + e.what());
  }
}

WrapperNote parse_wrapper_note(const std::string& text) {
  WrapperNote n;
  const auto j = nlohmann::json::parse(text, nullptr, false);
  if (j.is_discarded() || !j.is_object()) return n;
  n.record_written = get_or<bool>(j, "record_written", false);
  n.program_ended = get_or<bool>(j, "program_ended", false);
  n.signalled_us = get_or<std::int64_t>(j, "signalled_unix_us", 0);
  n.waited_ms = get_or<std::int64_t>(j, "waited_ms", 0);
  n.ended = get_or<std::string>(j, "ended", "");
  for (const auto& p : j.value("processes", nlohmann::json::array())) {
    const std::string state = get_or<std::string>(p, "state", "");
    n.was_stopped = n.was_stopped || state == "T" || state == "t";
  }
  return n;
}

JobRecords read_job_records(const std::string& dir) {
  JobRecords job;
  job.dir = dir;
  const std::string flight = dir + "/flight";
  DIR* d = ::opendir(flight.c_str());
  if (d == nullptr) {
    throw_io("no flight records in " + dir + " (" + flight +
             " is missing): give the job directory hpctrain launch printed, or HPCT_JOB_DIR of the job",
             ENOENT);
  }
  std::vector<std::string> names;
  while (dirent* e = ::readdir(d)) names.push_back(e->d_name);
  ::closedir(d);
  std::sort(names.begin(), names.end());
  const auto meta = nlohmann::json::parse(read_file_or_empty(dir + "/job.json"), nullptr, false);
  if (!meta.is_discarded() && meta.is_object()) {
    job.job_id = get_or<std::string>(meta, "job_id", "");
    job.size = get_or<int>(meta, "size", 0);
    job.hosts = get_or<std::vector<std::string>>(meta, "hosts", {});
  }
  for (const auto& name : names) {
    if (name.rfind("rank-", 0) != 0) continue;
    const int rank = std::atoi(name.c_str() + 5);
    const std::string text = read_file_or_empty(flight + "/" + name);
    if (name.size() > 13 && name.compare(name.size() - 13, 13, ".wrapper.json") == 0) {
      job.notes[rank] = parse_wrapper_note(text);
    } else if (name.size() > 5 && name.compare(name.size() - 5, 5, ".json") == 0) {
      try {
        RankRecord r = parse_rank_record(text, name);
        job.ranks[r.rank] = std::move(r);
      } catch (const Error& e) {
        job.unreadable.push_back(e.what());
      }
    }
  }
  if (job.size == 0 && !job.ranks.empty()) job.size = job.ranks.rbegin()->first + 1;
  return job;
}

}  // namespace hpct::why
