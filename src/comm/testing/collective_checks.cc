#include "comm/testing/collective_checks.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <sstream>
#include <thread>

#include "comm/reduce.h"

namespace hpct::comm::testing {
namespace {

// Reads element i of buf as a double (all test values are exact in double).
double get(DataType t, const void* buf, size_t i) {
  switch (t) {
    case DataType::kFloat32: return static_cast<const float*>(buf)[i];
    case DataType::kFloat64: return static_cast<const double*>(buf)[i];
    case DataType::kFloat16: return half_to_float(static_cast<const std::uint16_t*>(buf)[i]);
    case DataType::kBFloat16: return bfloat16_to_float(static_cast<const std::uint16_t*>(buf)[i]);
    case DataType::kInt32: return static_cast<const std::int32_t*>(buf)[i];
    case DataType::kInt64: return static_cast<double>(static_cast<const std::int64_t*>(buf)[i]);
    case DataType::kUInt8: return static_cast<const std::uint8_t*>(buf)[i];
    case DataType::kInt8: return static_cast<const std::int8_t*>(buf)[i];
    case DataType::kInt16: return static_cast<const std::int16_t*>(buf)[i];
  }
  return 0;
}

void put(DataType t, void* buf, size_t i, double v) {
  switch (t) {
    case DataType::kFloat32: static_cast<float*>(buf)[i] = static_cast<float>(v); break;
    case DataType::kFloat64: static_cast<double*>(buf)[i] = v; break;
    case DataType::kFloat16: static_cast<std::uint16_t*>(buf)[i] = float_to_half(static_cast<float>(v)); break;
    case DataType::kBFloat16:
      static_cast<std::uint16_t*>(buf)[i] = float_to_bfloat16(static_cast<float>(v));
      break;
    case DataType::kInt32: static_cast<std::int32_t*>(buf)[i] = static_cast<std::int32_t>(v); break;
    case DataType::kInt64: static_cast<std::int64_t*>(buf)[i] = static_cast<std::int64_t>(v); break;
    case DataType::kUInt8: static_cast<std::uint8_t*>(buf)[i] = static_cast<std::uint8_t>(v); break;
    case DataType::kInt8: static_cast<std::int8_t*>(buf)[i] = static_cast<std::int8_t>(v); break;
    case DataType::kInt16: static_cast<std::int16_t*>(buf)[i] = static_cast<std::int16_t>(v); break;
  }
}

// The value rank r contributes at index i for op. Products use 1s and 2s (at
// most three 2s in 8 ranks) so even uint8 and bfloat16 hold them exactly.
double input_value(ReduceOp op, DataType t, int r, size_t i) {
  if (op == ReduceOp::kProduct) return ((static_cast<size_t>(r) + i) % 3 == 0) ? 2.0 : 1.0;
  double v = static_cast<double>((static_cast<size_t>(r) * 5 + i * 3) % 11);
  if (op == ReduceOp::kMin || op == ReduceOp::kMax) {
    if (t != DataType::kUInt8) v -= 5;  // negatives too, where the type has them
  }
  return v;
}

// The reduction over ranks of input_value at index i, rounded as the backend
// rounds: exact sum/product/min/max, then for avg one division in the dtype's
// compute precision (float for 16-bit floats).
double expected_reduction(ReduceOp op, DataType t, int size, size_t i) {
  double acc = input_value(op, t, 0, i);
  for (int r = 1; r < size; ++r) {
    double v = input_value(op, t, r, i);
    switch (op) {
      case ReduceOp::kSum:
      case ReduceOp::kAvg: acc += v; break;
      case ReduceOp::kProduct: acc *= v; break;
      case ReduceOp::kMin: acc = std::min(acc, v); break;
      case ReduceOp::kMax: acc = std::max(acc, v); break;
    }
  }
  if (op == ReduceOp::kAvg) {
    if (!is_floating(t)) return std::trunc(acc / size);  // integers truncate toward zero
    if (t == DataType::kFloat64) return acc / size;
    float f = static_cast<float>(acc) / static_cast<float>(size);
    if (t == DataType::kFloat16) return half_to_float(float_to_half(f));
    if (t == DataType::kBFloat16) return bfloat16_to_float(float_to_bfloat16(f));
    return f;
  }
  return acc;
}

std::string label(const char* what, DataType t, ReduceOp op, size_t count) {
  std::ostringstream os;
  os << what << " " << dtype_name(t) << " " << reduce_op_name(op) << " count " << count;
  return os.str();
}

std::string label(const char* what, DataType t, size_t count) {
  std::ostringstream os;
  os << what << " " << dtype_name(t) << " count " << count;
  return os.str();
}

// Compares n elements; records at most the first mismatch per case so a
// broken backend does not print a million lines.
void compare(std::vector<std::string>& failures, const std::string& what, DataType t,
             const void* got, size_t n, const std::function<double(size_t)>& expect) {
  for (size_t i = 0; i < n; ++i) {
    double g = get(t, got, i), e = expect(i);
    if (!(g == e)) {
      std::ostringstream os;
      os << what << ": element " << i << " is " << g << ", expected " << e;
      failures.push_back(os.str());
      return;
    }
  }
}

// Room for at least one element so data() is never null when count is 0.
std::vector<unsigned char> buffer(DataType t, size_t n) {
  return std::vector<unsigned char>(std::max<size_t>(n, 1) * dtype_size(t));
}

}  // namespace

std::vector<std::string> check_allreduce(Communicator& comm, const CheckOptions& o) {
  std::vector<std::string> failures;
  const int r = comm.rank(), n = comm.size();
  for (DataType t : o.dtypes) {
    for (ReduceOp op : o.ops) {
      for (size_t count : o.counts) {
        auto in = buffer(t, count), out = buffer(t, count);
        for (size_t i = 0; i < count; ++i) put(t, in.data(), i, input_value(op, t, r, i));
        // Out of place first, then in place on the same data.
        AllreduceOptions a;
        a.input = in.data();
        a.output = out.data();
        a.count = count;
        a.dtype = t;
        a.op = op;
        allreduce(comm, a);
        auto expect = [&](size_t i) { return expected_reduction(op, t, n, i); };
        compare(failures, label("allreduce", t, op, count), t, out.data(), count, expect);
        compare(failures, label("allreduce changed its input", t, op, count), t, in.data(), count,
                [&](size_t i) { return input_value(op, t, r, i); });
        a.input = nullptr;
        a.output = in.data();
        allreduce(comm, a);
        compare(failures, label("allreduce in place", t, op, count), t, in.data(), count, expect);
      }
    }
  }
  return failures;
}

std::vector<std::string> check_broadcast(Communicator& comm, const CheckOptions& o) {
  std::vector<std::string> failures;
  const int r = comm.rank(), n = comm.size();
  for (DataType t : o.dtypes) {
    for (size_t count : o.counts) {
      // Every root for small messages, first and last for large ones.
      std::vector<int> roots;
      for (int root = 0; root < n; ++root) {
        if (count <= 64 || root == 0 || root == n - 1) roots.push_back(root);
      }
      for (int root : roots) {
        auto buf = buffer(t, count);
        for (size_t i = 0; i < count; ++i) {
          put(t, buf.data(), i, r == root ? input_value(ReduceOp::kSum, t, root, i) : 99);
        }
        BroadcastOptions b;
        b.buffer = buf.data();
        b.count = count;
        b.dtype = t;
        b.root = root;
        broadcast(comm, b);
        compare(failures, label("broadcast", t, count) + " root " + std::to_string(root), t,
                buf.data(), count, [&](size_t i) { return input_value(ReduceOp::kSum, t, root, i); });
      }
    }
  }
  return failures;
}

std::vector<std::string> check_allgather(Communicator& comm, const CheckOptions& o) {
  std::vector<std::string> failures;
  const int r = comm.rank(), n = comm.size();
  for (DataType t : o.dtypes) {
    for (size_t count : o.counts) {
      auto in = buffer(t, count), out = buffer(t, count * n);
      for (size_t i = 0; i < count; ++i) put(t, in.data(), i, input_value(ReduceOp::kSum, t, r, i));
      AllgatherOptions a;
      a.input = in.data();
      a.output = out.data();
      a.count = count;
      a.dtype = t;
      allgather(comm, a);
      compare(failures, label("allgather", t, count), t, out.data(), count * n, [&](size_t i) {
        return input_value(ReduceOp::kSum, t, static_cast<int>(i / count), i % count);
      });
    }
  }
  return failures;
}

std::vector<std::string> check_allgatherv(Communicator& comm, const CheckOptions& o) {
  std::vector<std::string> failures;
  const int r = comm.rank(), n = comm.size();
  for (DataType t : o.dtypes) {
    for (size_t count : o.counts) {
      // Rank q contributes count + q elements, except that odd ranks give
      // nothing when count is 0, so empty contributions are covered too.
      std::vector<size_t> counts(n);
      std::vector<size_t> offsets(n);
      size_t total = 0;
      for (int q = 0; q < n; ++q) {
        counts[q] = (count == 0 && q % 2 == 1) ? 0 : count + q;
        offsets[q] = total;
        total += counts[q];
      }
      auto in = buffer(t, counts[r]), out = buffer(t, total);
      for (size_t i = 0; i < counts[r]; ++i) put(t, in.data(), i, input_value(ReduceOp::kSum, t, r, i));
      AllgathervOptions a;
      a.input = in.data();
      a.output = out.data();
      a.counts = counts;
      a.dtype = t;
      allgatherv(comm, a);
      compare(failures, label("allgatherv", t, count), t, out.data(), total, [&](size_t i) {
        int q = static_cast<int>(std::upper_bound(offsets.begin(), offsets.end(), i) - offsets.begin()) - 1;
        while (q > 0 && counts[q] == 0) --q;  // empty blocks share their offset
        return input_value(ReduceOp::kSum, t, q, i - offsets[q]);
      });
    }
  }
  return failures;
}

namespace {

// Per-rank counts: rank q keeps count + q elements, the last rank none.
void check_reduce_scatter_counts(Communicator& comm, std::vector<std::string>& failures, DataType t, ReduceOp op,
                                 size_t count) {
  const int r = comm.rank(), n = comm.size();
  std::vector<size_t> counts(static_cast<size_t>(n));
  size_t total = 0, before = 0;
  for (int q = 0; q < n; ++q) {
    counts[q] = q == n - 1 && n > 1 ? 0 : count + static_cast<size_t>(q);
    if (q < r) before += counts[q];
    total += counts[q];
  }
  auto in = buffer(t, total), out = buffer(t, counts[r]);
  for (size_t i = 0; i < total; ++i) put(t, in.data(), i, input_value(op, t, r, i));
  ReduceScatterOptions a;
  a.input = in.data();
  a.output = out.data();
  a.counts = counts;
  a.dtype = t;
  a.op = op;
  reduce_scatter(comm, a);
  compare(failures, label("reduce_scatter with counts", t, op, count), t, out.data(), counts[r],
          [&](size_t j) { return expected_reduction(op, t, n, before + j); });
}

}  // namespace

std::vector<std::string> check_reduce_scatter(Communicator& comm, const CheckOptions& o) {
  std::vector<std::string> failures;
  const int r = comm.rank(), n = comm.size();
  for (DataType t : o.dtypes) {
    for (ReduceOp op : o.ops) {
      for (size_t count : o.counts) {
        if (count > (1u << 18)) count = 1u << 18;  // input is count * size elements
        auto in = buffer(t, count * n), out = buffer(t, count);
        for (size_t i = 0; i < count * n; ++i) put(t, in.data(), i, input_value(op, t, r, i));
        ReduceScatterOptions a;
        a.input = in.data();
        a.output = out.data();
        a.count = count;
        a.dtype = t;
        a.op = op;
        reduce_scatter(comm, a);
        compare(failures, label("reduce_scatter", t, op, count), t, out.data(), count,
                [&](size_t j) { return expected_reduction(op, t, n, r * count + j); });
        // Per-rank counts: every dtype and op on the small counts, float32
        // also on the large one (the suites' time goes to large counts).
        if (count <= 7 || t == DataType::kFloat32) check_reduce_scatter_counts(comm, failures, t, op, count);
      }
    }
  }
  return failures;
}

std::vector<std::string> check_reduce_scatter_order(Communicator& comm) {
  std::vector<std::string> failures;
  const int r = comm.rank(), n = comm.size();
  // Uneven blocks with an empty one; values whose sums round, so that a
  // different order shows.
  std::vector<size_t> counts(static_cast<size_t>(n));
  for (int q = 0; q < n; ++q) counts[q] = q == 1 ? 0 : 1000 + 37 * static_cast<size_t>(q);
  size_t total = 0, before = 0;
  for (int q = 0; q < n; ++q) {
    if (q < r) before += counts[q];
    total += counts[q];
  }
  auto value = [](int q, size_t i) {
    return static_cast<float>(std::sin(0.37 * static_cast<double>(i) + q) * std::pow(10.0, (i + q) % 7) / 3.0);
  };
  std::vector<std::vector<float>> all(static_cast<size_t>(n), std::vector<float>(total));
  for (int q = 0; q < n; ++q) {
    for (size_t i = 0; i < total; ++i) all[q][i] = value(q, i);
  }
  for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAvg}) {
    std::vector<float> out(counts[r] + 1, -1.0f), want(counts[r] + 1, -1.0f);
    ReduceScatterOptions a;
    a.input = all[r].data();
    a.output = out.data();
    a.counts = counts;
    a.op = op;
    reduce_scatter(comm, a);
    std::vector<const void*> blocks;
    for (int q = 0; q < n; ++q) blocks.push_back(all[q].data() + before);
    reduce_in_order(want.data(), blocks, counts[r], DataType::kFloat32, op);
    if (std::memcmp(out.data(), want.data(), out.size() * sizeof(float)) != 0) {
      failures.push_back(std::string("reduce_scatter with counts, ") + reduce_op_name(op) + ": rank " +
                         std::to_string(r) + "'s block differs from the sum in rank order (or was overrun)");
    }
  }
  return failures;
}

std::vector<std::string> check_send_recv(Communicator& comm, const CheckOptions& o) {
  std::vector<std::string> failures;
  const int r = comm.rank(), n = comm.size();
  if (n < 2) return failures;
  const int next = (r + 1) % n, prev = (r + n - 1) % n;
  for (DataType t : o.dtypes) {
    for (size_t count : o.counts) {
      auto out = buffer(t, count), in = buffer(t, count);
      for (size_t i = 0; i < count; ++i) put(t, out.data(), i, input_value(ReduceOp::kSum, t, r, i));
      SendOptions s;
      s.data = out.data();
      s.count = count;
      s.dtype = t;
      s.peer = next;
      s.tag = 7;
      RecvOptions v;
      v.data = in.data();
      v.count = count;
      v.dtype = t;
      v.peer = prev;
      v.tag = 7;
      // Even ranks send first, odd ranks receive first: no cycle of blocked sends.
      if (r % 2 == 0) {
        send(comm, s);
        recv(comm, v);
      } else {
        recv(comm, v);
        send(comm, s);
      }
      compare(failures, label("send/recv", t, count) + " from " + std::to_string(prev), t,
              in.data(), count, [&](size_t i) { return input_value(ReduceOp::kSum, t, prev, i); });
    }
  }
  return failures;
}

std::vector<std::string> check_alltoall(Communicator& comm, const CheckOptions& o) {
  std::vector<std::string> failures;
  const int r = comm.rank(), n = comm.size();
  // Rank r's block for rank p: values of "rank" r * n + p, so every block of
  // every sender differs.
  for (DataType t : o.dtypes) {
    for (size_t count : o.counts) {
      const size_t total = count * static_cast<size_t>(n);
      auto in = buffer(t, total), out = buffer(t, total);
      for (int p = 0; p < n; ++p) {
        for (size_t i = 0; i < count; ++i) {
          put(t, in.data(), p * count + i, input_value(ReduceOp::kSum, t, r * n + p, i));
        }
      }
      AlltoallOptions a;
      a.input = in.data();
      a.output = out.data();
      a.count = count;
      a.dtype = t;
      a.tag = 9;
      alltoall(comm, a);
      compare(failures, label("alltoall", t, count), t, out.data(), total, [&](size_t j) {
        const int from = static_cast<int>(j / std::max<size_t>(count, 1));
        return input_value(ReduceOp::kSum, t, from * n + r, j % std::max<size_t>(count, 1));
      });
    }
  }
  return failures;
}

std::vector<std::string> check_barrier(Communicator& comm) {
  std::vector<std::string> failures;
  using namespace std::chrono;
  const int r = comm.rank();
  barrier(comm);
  std::this_thread::sleep_for(milliseconds(15 * r));
  const std::int64_t entered =
      duration_cast<microseconds>(steady_clock::now().time_since_epoch()).count();
  barrier(comm);
  const std::int64_t left =
      duration_cast<microseconds>(steady_clock::now().time_since_epoch()).count();
  const std::vector<std::int64_t> all_entered = allgather_value(comm, entered);
  const std::int64_t last = *std::max_element(all_entered.begin(), all_entered.end());
  if (left < last) {
    failures.push_back("barrier: rank " + std::to_string(r) + " left " +
                       std::to_string(last - left) + " us before the last rank entered");
  }
  return failures;
}

std::vector<std::string> check_everything(Communicator& comm, const CheckOptions& o) {
  std::vector<std::string> all;
  for (auto* f : {check_allreduce, check_broadcast, check_allgather, check_allgatherv,
                  check_reduce_scatter, check_send_recv}) {
    auto got = f(comm, o);
    all.insert(all.end(), got.begin(), got.end());
  }
  auto ordered = check_reduce_scatter_order(comm);
  all.insert(all.end(), ordered.begin(), ordered.end());
  auto b = check_barrier(comm);
  all.insert(all.end(), b.begin(), b.end());
  return all;
}

}  // namespace hpct::comm::testing
