#include "engine/auto_compression.h"

#include <algorithm>
#include <cstdint>
#include <limits>

#include "comm/shm_allreduce.h"
#include "core/clock.h"
#include "engine/compression.h"

namespace hpct::engine {
namespace {

bool runs_locally(comm::Communicator& comm) {
  if (comm.size() == 1) return true;
  const std::string a = comm.algorithm(comm::OpKind::kAllreduce, 1 << 20);
  return a.rfind("shm:", 0) == 0 || a == "local";
}

int size_class(std::size_t bytes) {
  int c = 0;
  while ((std::size_t{2} << c) <= bytes && c < AutoCompression::kMaxClass) ++c;
  return c;
}

double ms_since(SteadyClock::time_point t0) {
  return std::chrono::duration<double, std::milli>(SteadyClock::now() - t0).count();
}

}  // namespace

AutoCompression::AutoCompression(comm::Communicator& comm, std::function<std::int64_t()> host_id)
    : comm_(comm),
      local_(runs_locally(comm)),
      host_id_(host_id ? std::move(host_id) : std::function<std::int64_t()>(comm::host_identity)) {}

Compression AutoCompression::rule(double none_ms, double fp16_ms) {
  return fp16_ms < kKeepMargin * none_ms ? Compression::kFp16 : Compression::kNone;
}

Compression AutoCompression::choose(std::size_t count) {
  if (local_ || count * 4 < kMinBytes) return Compression::kNone;
  if (!hosts_known_) {
    // Collective, like the probe: every rank gets here at the same allreduce.
    hosts_known_ = true;
    const auto ids = comm::allgather_value(comm_, host_id_());
    local_ = std::all_of(ids.begin(), ids.end(), [&](std::int64_t id) { return id == ids[0]; });
    if (local_) return Compression::kNone;
  }
  const int c = size_class(count * 4);
  for (const auto& [cls, d] : decisions_) {
    if (cls == c) return d.choice;
  }
  decisions_.emplace_back(c, probe(c));
  return decisions_.back().second.choice;
}

AutoCompression::Decision AutoCompression::probe(int cls) {
  Decision d;
  d.probe_bytes = std::size_t{1} << cls;
  const std::size_t n = d.probe_bytes / 4;
  // Gradient-like values: small, of both signs, not all alike.
  std::vector<float> work(n), grads(n);
  for (std::size_t i = 0; i < n; ++i) grads[i] = static_cast<float>((i % 251) - 125) * 1e-3f;
  std::vector<std::uint16_t> wire(n);
  double best_none = std::numeric_limits<double>::infinity();
  double best_fp16 = best_none;
  comm::AllreduceOptions o;
  o.op = comm::ReduceOp::kSum;
  for (int r = 0; r < kProbeRepeats; ++r) {
    std::copy(grads.begin(), grads.end(), work.begin());
    auto t0 = SteadyClock::now();
    o.output = work.data();
    o.count = n;
    o.dtype = comm::DataType::kFloat32;
    comm::allreduce(comm_, o);
    best_none = std::min(best_none, ms_since(t0));

    t0 = SteadyClock::now();
    compress(grads.data(), wire.data(), n, Compression::kFp16);
    o.output = wire.data();
    o.dtype = comm::DataType::kFloat16;
    comm::allreduce(comm_, o);
    decompress(wire.data(), work.data(), n, Compression::kFp16, 1.0f);
    best_fp16 = std::min(best_fp16, ms_since(t0));
  }
  // The slowest rank's times, so every rank decides alike.
  double times[2] = {best_none, best_fp16};
  o.output = times;
  o.count = 2;
  o.dtype = comm::DataType::kFloat64;
  o.op = comm::ReduceOp::kMax;
  comm::allreduce(comm_, o);
  d.none_ms = times[0];
  d.fp16_ms = times[1];
  d.choice = rule(d.none_ms, d.fp16_ms);
  d.reason = d.choice == Compression::kFp16 ? "float16 with its casts was faster than float32"
                                            : "float16 with its casts was not clearly faster";
  return d;
}

}  // namespace hpct::engine
