// What one operation costs the flight record on the submitting thread and
// the engine's round (docs/why.md, "Overhead"): submitted() with a typical
// gradient's name and shape and a C++ call site, then the three marks the
// round makes (negotiated, started, done), against the same calls on a
// record that is off (capacity 0). Run:
//   build/src/engine/flight_record_bench --benchmark_min_time=0.5
#include <benchmark/benchmark.h>

#include <array>
#include <cstdint>

#include "engine/flight_record.h"

namespace {

using hpct::engine::CallSite;
using hpct::engine::FlightPath;
using hpct::engine::FlightRecord;
using hpct::engine::FlightState;
using hpct::engine::Request;

void one_operation(benchmark::State& state, std::size_t capacity) {
  FlightRecord record(capacity);
  Request r;
  r.name = "grad.layer4.conv2.weight";
  r.shape = {512, 512, 3, 3};
  const CallSite site = CallSite::here();
  for (auto _ : state) {
    const auto t = hpct::SteadyClock::now();
    std::array<std::uint64_t, 1> seq{record.submitted(r, 4 * 512 * 512 * 9, site, t)};
    auto id = [](std::uint64_t s) { return s; };
    record.mark(seq.begin(), seq.end(), id, FlightState::kNegotiated, t);
    record.mark(seq.begin(), seq.end(), id, FlightState::kStarted, t, FlightPath::kInPlace);
    record.mark(seq.begin(), seq.end(), id, FlightState::kDone, t);
    benchmark::DoNotOptimize(seq);
  }
}

void BM_FlightRecordOn(benchmark::State& state) { one_operation(state, 2000); }
void BM_FlightRecordOff(benchmark::State& state) { one_operation(state, 0); }
BENCHMARK(BM_FlightRecordOn);
BENCHMARK(BM_FlightRecordOff);

}  // namespace

BENCHMARK_MAIN();
