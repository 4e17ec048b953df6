#include "bench/comm_bench.h"

#include <algorithm>
#include <chrono>
#include <sstream>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/stats.h"

namespace hpct::bench {
namespace {

using comm::OpKind;
using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

// NCCL-tests' bus bandwidth: the bytes each link carries, comparable across
// world sizes. For 2 ranks an allreduce's bus bandwidth equals bytes / time.
double bus_factor(OpKind op, int n) {
  switch (op) {
    case OpKind::kAllreduce: return 2.0 * (n - 1) / n;
    case OpKind::kAllgather:
    case OpKind::kReduceScatter: return static_cast<double>(n - 1) / n;
    default: return 1.0;
  }
}

// Buffers for one op at one size: `bytes` per rank, float32.
struct Buffers {
  std::vector<float> in, out;
};

// Every rank's input is 1.0 in every element (make_buffers).
constexpr float kInput = 1.0f;

Buffers make_buffers(OpKind op, size_t count, int n) {
  Buffers b;
  switch (op) {
    case OpKind::kAllgather:
      b.in.assign(std::max<size_t>(count, 1), kInput);
      b.out.assign(std::max<size_t>(count * n, 1), 0.0f);
      break;
    case OpKind::kReduceScatter:
      b.in.assign(std::max<size_t>(count * n, 1), kInput);
      b.out.assign(std::max<size_t>(count, 1), 0.0f);
      break;
    default:
      b.in.assign(std::max<size_t>(count, 1), kInput);
      break;
  }
  return b;
}

void run_ours(comm::Communicator& c, OpKind op, Buffers& b, size_t count) {
  switch (op) {
    case OpKind::kAllreduce: {
      comm::AllreduceOptions o;
      o.output = b.in.data();
      o.count = count;
      comm::allreduce(c, o);
      break;
    }
    case OpKind::kBroadcast: {
      comm::BroadcastOptions o;
      o.buffer = b.in.data();
      o.count = count;
      comm::broadcast(c, o);
      break;
    }
    case OpKind::kAllgather: {
      comm::AllgatherOptions o;
      o.input = b.in.data();
      o.output = b.out.data();
      o.count = count;
      comm::allgather(c, o);
      break;
    }
    case OpKind::kReduceScatter: {
      comm::ReduceScatterOptions o;
      o.input = b.in.data();
      o.output = b.out.data();
      o.count = count;
      comm::reduce_scatter(c, o);
      break;
    }
    case OpKind::kBarrier:
    case OpKind::kAllgatherv:
      comm::barrier(c);
      break;
  }
}

// After an allreduce of fresh inputs every element is the world's sum.
void check_sum(const Buffers& b, size_t count, int n) {
  if (count == 0) return;
  const float want = kInput * static_cast<float>(n);
  for (size_t i : {size_t{0}, count / 2, count - 1}) {
    if (b.in[i] != want) {
      throw Error(ErrorCode::kDataCorrupt, "bench comm: the allreduce of " + std::to_string(count) +
                                            " floats gave " + std::to_string(b.in[i]) +
                                            " at element " + std::to_string(i) + ", not " +
                                            std::to_string(want));
    }
  }
}

// The slowest rank's time for each iteration: what a training step waits for.
std::vector<double> slowest(comm::Communicator& c, std::vector<double> times) {
  comm::AllreduceOptions o;
  o.output = times.data();
  o.count = times.size();
  o.dtype = comm::DataType::kFloat64;
  o.op = comm::ReduceOp::kMax;
  comm::allreduce(c, o);
  return times;
}

}  // namespace

const char* op_name(OpKind op) {
  switch (op) {
    case OpKind::kAllreduce: return "allreduce";
    case OpKind::kBroadcast: return "broadcast";
    case OpKind::kAllgather: return "allgather";
    case OpKind::kAllgatherv: return "allgatherv";
    case OpKind::kReduceScatter: return "reduce_scatter";
    case OpKind::kBarrier: return "barrier";
  }
  return "?";
}

std::vector<OpKind> parse_ops(const std::string& text) {
  if (text == "all") {
    return {OpKind::kAllreduce, OpKind::kBroadcast, OpKind::kAllgather, OpKind::kReduceScatter,
            OpKind::kBarrier};
  }
  std::vector<OpKind> out;
  std::stringstream ss(text);
  std::string item;
  while (std::getline(ss, item, ',')) {
    bool found = false;
    for (OpKind k : {OpKind::kAllreduce, OpKind::kBroadcast, OpKind::kAllgather,
                     OpKind::kReduceScatter, OpKind::kBarrier}) {
      if (item == op_name(k)) out.push_back(k), found = true;
    }
    if (!found) {
      throw_invalid_argument("unknown op '" + item +
                             "'; choose allreduce, broadcast, allgather, reduce_scatter, barrier "
                             "or all");
    }
  }
  return out;
}

std::vector<std::string> run_comm_bench(comm::Communicator& c, const CommBenchOptions& opts,
                                        RawAllreduce* raw,
                                        const std::function<void(const nlohmann::json&)>& emit) {
  const int n = c.size();
  std::vector<std::string> failed;
  for (OpKind op : opts.ops) {
    const auto sizes = op == OpKind::kBarrier ? std::vector<std::uint64_t>{0} : opts.sizes;
    for (std::uint64_t bytes : sizes) {
      const size_t count = bytes / sizeof(float);
      Buffers b = make_buffers(op, count, n);
      const bool with_raw = raw != nullptr && op == OpKind::kAllreduce;

      // Warm up both paths (connections, page faults), then let rank 0 pick
      // an iteration count that fills the time budget, the same on all ranks.
      auto t0 = Clock::now();
      for (int i = 0; i < opts.warmup; ++i) {
        run_ours(c, op, b, count);
        if (with_raw) raw->run(b.in.data(), count);
      }
      double per_iter = seconds_since(t0) / std::max(1, opts.warmup * (with_raw ? 2 : 1));
      std::int64_t iters = opts.iters;
      if (iters <= 0) iters = std::clamp<std::int64_t>(static_cast<std::int64_t>(opts.budget_s / std::max(per_iter, 1e-6)), 5, 200);
      comm::BroadcastOptions bo;
      bo.buffer = &iters;
      bo.count = 1;
      bo.dtype = comm::DataType::kInt64;
      comm::broadcast(c, bo);

      std::vector<double> ours, theirs;
      for (std::int64_t i = 0; i < iters; ++i) {
        // Alternate which goes first so drift and cache effects hit both.
        for (int k = 0; k < (with_raw ? 2 : 1); ++k) {
          const bool do_raw = with_raw && ((i + k) % 2 == 1);
          if (opts.fresh_input) std::fill(b.in.begin(), b.in.end(), kInput);
          comm::barrier(c);
          auto start = Clock::now();
          if (do_raw) {
            raw->run(b.in.data(), count);
            theirs.push_back(seconds_since(start));
          } else {
            run_ours(c, op, b, count);
            ours.push_back(seconds_since(start));
            if (opts.fresh_input && op == OpKind::kAllreduce) check_sum(b, count, n);
          }
        }
      }
      ours = slowest(c, ours);
      if (with_raw) theirs = slowest(c, theirs);
      if (c.rank() != 0) continue;

      const double t = median(ours);
      nlohmann::json j = {{"bench", "comm"},
                          {"backend", c.backend_name()},
                          {"op", op_name(op)},
                          {"np", n},
                          {"bytes", bytes},
                          {"dtype", "float32"},
                          {"iters", iters},
                          {"input", opts.fresh_input ? "fresh" : "reused"},
                          {"algorithm", c.algorithm(op, bytes)},
                          {"time_us", t * 1e6},
                          {"min_us", *std::min_element(ours.begin(), ours.end()) * 1e6}};
      if (op != OpKind::kBarrier) {
        j["busbw_GBps"] = t > 0 ? bytes * bus_factor(op, n) / t / 1e9 : 0.0;
      }
      if (with_raw) {
        const double r = median(theirs);
        j["raw_call"] = raw->name();
        j["raw_time_us"] = r * 1e6;
        j["raw_busbw_GBps"] = r > 0 ? bytes * bus_factor(op, n) / r / 1e9 : 0.0;
        // Paired: each of our runs against the raw run next to it in time,
        // so both saw the same machine (on 2 shared cores the times are
        // bimodal and the two medians can land in different modes).
        std::vector<double> ratios;
        for (size_t i = 0; i < ours.size() && i < theirs.size(); ++i) {
          if (theirs[i] > 0) ratios.push_back(ours[i] / theirs[i]);
        }
        const double ratio = median(ratios);
        j["overhead_ratio"] = ratio;
        j["raw_min_us"] = *std::min_element(theirs.begin(), theirs.end()) * 1e6;
        const std::string algorithm = j["algorithm"];
        if (algorithm.rfind("shm:", 0) == 0 && bytes >= opts.check_min_bytes) {
          const bool ok = ratio <= opts.check_max_ratio;
          j["check"] = ok ? "ok" : "slower than " + raw->name();
          if (!ok) {
            std::ostringstream line;
            line.precision(2);
            line << std::fixed << "the shared-memory allreduce of " << bytes << " bytes took "
                 << ratio << "x the time of " << raw->name() << " (at most "
                 << opts.check_max_ratio << "x allowed)";
            failed.push_back(line.str());
          }
        }
      }
      emit(j);
    }
  }
  return failed;
}

}  // namespace hpct::bench
