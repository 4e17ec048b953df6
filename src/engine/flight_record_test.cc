// The flight record: the ring, its states and JSON, what the engine records
// on real Gloo ranks (threads of this process), the writes on a failed
// operation and on SIGUSR1, and its cost per operation.
#include "engine/flight_record.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include <nlohmann/json.hpp>

#include "comm/testing/thread_world.h"
#include "core/config.h"
#include "core/file.h"
#include "engine/engine.h"

namespace hpct::engine {
namespace {

Request request(const std::string& name, std::vector<std::int64_t> shape) {
  Request r;
  r.name = name;
  r.shape = std::move(shape);
  return r;
}

nlohmann::json read_json(const std::string& path) {
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  return nlohmann::json::parse(ss.str());
}

struct TempDir {
  std::string path;
  TempDir() {
    char tmpl[] = "/tmp/hpct-flight-XXXXXX";
    path = ::mkdtemp(tmpl);
  }
  ~TempDir() { std::filesystem::remove_all(path); }
};

TEST(FlightRecord, KeepsTheNewestEntriesOldestFirst) {
  FlightRecord rec(4);
  const auto t = SteadyClock::now();
  for (int i = 0; i < 6; ++i) {
    EXPECT_EQ(rec.submitted(request("t" + std::to_string(i), {i + 1}), 4, CallSite::here(), t),
              static_cast<std::uint64_t>(i + 1));
  }
  auto s = rec.snapshot();
  EXPECT_EQ(s.recorded, 6u);
  ASSERT_EQ(s.entries.size(), 4u);
  EXPECT_EQ(s.entries.front().seq, 3u);
  EXPECT_STREQ(s.entries.front().name, "t2");
  EXPECT_EQ(s.entries.back().seq, 6u);
  EXPECT_EQ(s.entries.back().shape[0], 6);
  EXPECT_NE(std::string(s.entries.back().file).find("flight_record_test.cc"), std::string::npos);
}

TEST(FlightRecord, StatesPathAndAReusedSlotIgnored) {
  FlightRecord rec(2);
  const auto t = SteadyClock::now();
  std::vector<std::uint64_t> seqs = {rec.submitted(request("a", {2}), 8, CallSite::here(), t),
                                     rec.submitted(request("b", {3}), 12, CallSite::here(), t)};
  auto id = [](std::uint64_t s) { return s; };
  rec.mark(seqs.begin(), seqs.end(), id, FlightState::kNegotiated, t);
  rec.mark(seqs.begin(), seqs.end(), id, FlightState::kStarted, t, FlightPath::kPacked);
  rec.mark(seqs.begin(), seqs.begin() + 1, id, FlightState::kDone, t);
  rec.submitted(request("c", {1}), 4, CallSite::here(), t);  // takes a's slot
  rec.mark(seqs.begin(), seqs.begin() + 1, id, FlightState::kFailed, t);  // a's: ignored
  auto s = rec.snapshot();
  ASSERT_EQ(s.entries.size(), 2u);
  EXPECT_STREQ(s.entries[0].name, "b");
  EXPECT_EQ(s.entries[0].state, FlightState::kStarted);
  EXPECT_EQ(s.entries[0].path, FlightPath::kPacked);
  EXPECT_EQ(s.entries[0].fused, 2);
  EXPECT_STREQ(s.entries[1].name, "c");
  EXPECT_EQ(s.entries[1].state, FlightState::kSubmitted);
}

TEST(FlightRecord, CutsLongNamesAndStacksAndWritesJson) {
  FlightRecord rec(8);
  const std::string long_name(300, 'n');
  CallSite py{nullptr, 0, "train.py:42 step\nmodel.py:7 forward"};
  rec.submitted(request(long_name, {2, 3, 4, 5, 6, 7, 8, 9, 10, 11}), 0, py, SteadyClock::now());
  rec.set_phase(Phase::kBackward, 12);
  rec.note_error("first");
  rec.note_error("second");
  FlightIdentity who;
  who.rank = 3;
  who.size = 4;
  who.host = "h3";
  auto j = nlohmann::json::parse(flight_record_json(rec.snapshot(), who, "SIGUSR1"));
  EXPECT_EQ(j["rank"], 3);
  EXPECT_EQ(j["host"], "h3");
  EXPECT_EQ(j["reason"], "SIGUSR1");
  EXPECT_EQ(j["phase"]["name"], "backward");
  EXPECT_EQ(j["phase"]["step"], 12);
  EXPECT_EQ(j["first_error"], "first");
  EXPECT_EQ(j["last_error"], "second");
  ASSERT_EQ(j["entries"].size(), 1u);
  const auto& e = j["entries"][0];
  EXPECT_EQ(e["name"].get<std::string>().size(), FlightEntry::kNameBytes - 1);
  EXPECT_EQ(e["shape"].size(), FlightEntry::kMaxDims);
  EXPECT_EQ(e["shape_cut"], true);
  EXPECT_EQ(e["stack"], "train.py:42 step\nmodel.py:7 forward");
  EXPECT_EQ(e["state"], "submitted");
  EXPECT_TRUE(e["ended_us"].is_null());
  EXPECT_NEAR(e["submitted_us"].get<double>(), static_cast<double>(unix_ns() / 1000), 5e6);
  EXPECT_THROW(parse_phase("lunch"), Error);
  EXPECT_EQ(parse_phase("data"), Phase::kData);
}

TEST(FlightRecord, OffRecordsNothing) {
  FlightRecord rec(0);
  EXPECT_EQ(rec.submitted(request("a", {1}), 4, CallSite::here(), SteadyClock::now()), 0u);
  rec.set_phase(Phase::kData);
  EXPECT_TRUE(rec.snapshot().entries.empty());
}

// Two ranks disagree on a tensor's shape: the engine fails it, and each
// rank's record, written to the job directory, holds the tensor as failed,
// its own shape and the error; SIGUSR1 writes them again.
TEST(FlightRecord, EngineWritesEachRanksRecordOnAFailureAndOnSigusr1) {
  TempDir dir;
  EngineOptions o;
  o.cycle_ms = 1;
  o.job_dir = dir.path;
  comm::testing::run_gloo_world(2, Millis(20000), [&](comm::GlooCommunicator& c) {
    Engine e(c, o, Logger(LogLevel::kError, "all", c.rank(), [](const std::string&) {}));
    std::vector<float> ok(4, 1.0f);
    e.allreduce_async("ok", {ok.data(), comm::DataType::kFloat32, {4}}, comm::ReduceOp::kSum).wait();
    e.flight_record().set_phase(Phase::kBackward, 7);
    std::vector<float> bad(static_cast<size_t>(4 + c.rank()), 1.0f);
    Handle h = e.allreduce_async("bad", {bad.data(), comm::DataType::kFloat32, {4 + c.rank()}}, comm::ReduceOp::kSum);
    EXPECT_THROW(h.wait(), Error);
    comm::barrier(c);
    if (c.rank() == 0) {
      // The failure's writes first, then the signal's (a thread of its own).
      // A request that comes while another is still pending joins it, under
      // the first one's reason: so the signal waits until both failure
      // records are on disk (each appears whole, by rename).
      const std::string path = dir.path + "/flight/rank-1.json";
      Deadline written(Millis(5000));
      while (!written.expired() && (read_file_or_empty(path).empty() ||
                                    read_file_or_empty(dir.path + "/flight/rank-0.json").empty())) {
        std::this_thread::sleep_for(Millis(10));
      }
      ::kill(::getpid(), SIGUSR1);
      Deadline d(Millis(5000));
      while (!d.expired() && read_file_or_empty(path).find("\"SIGUSR1\"") == std::string::npos) {
        std::this_thread::sleep_for(Millis(10));
      }
      EXPECT_NE(read_file_or_empty(path).find("\"reason\": \"SIGUSR1\""), std::string::npos);
    }
    comm::barrier(c);
  });
  for (int r = 0; r < 2; ++r) {
    auto j = read_json(dir.path + "/flight/rank-" + std::to_string(r) + ".json");
    EXPECT_EQ(j["rank"], r);
    EXPECT_EQ(j["size"], 2);
    EXPECT_EQ(j["phase"]["name"], "backward");
    EXPECT_NE(j["first_error"].get<std::string>().find("bad"), std::string::npos) << j.dump();
    ASSERT_EQ(j["entries"].size(), 2u);
    EXPECT_EQ(j["entries"][0]["state"], "done");
    EXPECT_EQ(j["entries"][0]["path"], "in place");
    EXPECT_EQ(j["entries"][1]["name"], "bad");
    EXPECT_EQ(j["entries"][1]["state"], "failed");
    EXPECT_EQ(j["entries"][1]["shape"][0], 4 + r);
    EXPECT_NE(j["entries"][1]["site"].get<std::string>().find("flight_record_test.cc"), std::string::npos);
  }
}
}  // namespace
}  // namespace hpct::engine
