// Reading tf.train.Example records: our parser (example.h) against the
// parser libprotobuf generates from example.proto, on the same serialized
// records. Both produce what the loader needs: every feature's kind and
// values, bytes as views (ours into the record; protobuf's into the strings
// it copied them to). The records are what `hpctrain data pack --format
// tfrecord` writes: an image as bytes and a label as int64, for a 28x28 PNG
// (~300 B) and a 224x224 JPEG (~6 KB), plus a record with a float list.
//
//   build/src/data/example_parse_bench [--benchmark_repetitions=3]
#include <benchmark/benchmark.h>

#include <random>
#include <string>
#include <vector>

#include "data/formats/example.h"
#include "example.pb.h"  // generated from formats/example.proto

namespace {

using hpct::data::ExampleFeature;
using hpct::data::ExampleFeatures;

std::vector<std::string> records(size_t image_bytes, bool with_floats) {
  std::mt19937 rng(7);
  std::vector<std::string> out;
  for (int i = 0; i < 256; ++i) {
    std::string image(image_bytes, '\0');
    for (auto& c : image) c = static_cast<char>(rng());
    hpct::data::ExampleWriter w;
    w.add_bytes("image/encoded", {image});
    w.add_bytes("image/format", {"png"});
    w.add_int64("image/class/label", {static_cast<std::int64_t>(rng() % 10)});
    if (with_floats) w.add_float("image/bbox", std::vector<float>(16, 0.5f));
    out.push_back(w.finish());
  }
  return out;
}

// The protobuf message into our result type, so both sides do the same work.
ExampleFeatures from_proto(const hpct::tfexample::Example& ex) {
  ExampleFeatures out;
  for (const auto& [name, f] : ex.features().feature()) {
    ExampleFeature e;
    switch (f.kind_case()) {
      case hpct::tfexample::Feature::kBytesList:
        e.kind = ExampleFeature::Kind::kBytes;
        for (const auto& v : f.bytes_list().value()) e.bytes.emplace_back(v);
        break;
      case hpct::tfexample::Feature::kFloatList:
        e.kind = ExampleFeature::Kind::kFloat;
        e.floats.assign(f.float_list().value().begin(), f.float_list().value().end());
        break;
      case hpct::tfexample::Feature::kInt64List:
        e.kind = ExampleFeature::Kind::kInt64;
        e.int64s.assign(f.int64_list().value().begin(), f.int64_list().value().end());
        break;
      default:
        break;
    }
    out.emplace(name, std::move(e));
  }
  return out;
}

void run(benchmark::State& state, bool proto, size_t image_bytes, bool floats) {
  const auto recs = records(image_bytes, floats);
  size_t i = 0, bytes = 0;
  hpct::tfexample::Example ex;
  for (auto _ : state) {
    const std::string& r = recs[i++ % recs.size()];
    if (proto) {
      if (!ex.ParseFromString(r)) state.SkipWithError("protobuf could not parse a record");
      auto f = from_proto(ex);
      benchmark::DoNotOptimize(f);
    } else {
      auto f = hpct::data::parse_example(r);
      benchmark::DoNotOptimize(f);
    }
    bytes += r.size();
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(bytes));
  state.SetItemsProcessed(state.iterations());
}

void BM_Ours_Png28(benchmark::State& s) { run(s, false, 300, false); }
void BM_Protobuf_Png28(benchmark::State& s) { run(s, true, 300, false); }
void BM_Ours_Jpeg224(benchmark::State& s) { run(s, false, 6000, false); }
void BM_Protobuf_Jpeg224(benchmark::State& s) { run(s, true, 6000, false); }
void BM_Ours_WithFloats(benchmark::State& s) { run(s, false, 300, true); }
void BM_Protobuf_WithFloats(benchmark::State& s) { run(s, true, 300, true); }
BENCHMARK(BM_Ours_Png28);
BENCHMARK(BM_Protobuf_Png28);
BENCHMARK(BM_Ours_Jpeg224);
BENCHMARK(BM_Protobuf_Jpeg224);
BENCHMARK(BM_Ours_WithFloats);
BENCHMARK(BM_Protobuf_WithFloats);

}  // namespace

BENCHMARK_MAIN();
