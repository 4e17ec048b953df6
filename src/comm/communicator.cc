#include "comm/communicator.h"

#include <cstring>

#include "comm/reduce.h"
#include "core/error.h"

namespace hpct::comm {
namespace {

std::string where(const Communicator& c, const char* op) {
  return std::string(op) + " on rank " + std::to_string(c.rank()) + " of " +
         std::to_string(c.size()) + " (" + c.backend_name() + ")";
}

void need_buffer(const Communicator& c, const char* op, const void* p, size_t count,
                 const char* name) {
  if (p == nullptr && count > 0) {
    throw_invalid_argument(where(c, op) + ": " + name + " is null but count is " +
                           std::to_string(count));
  }
}

void need_rank(const Communicator& c, const char* op, int r, const char* name) {
  if (r < 0 || r >= c.size()) {
    throw_invalid_argument(where(c, op) + ": " + name + " " + std::to_string(r) +
                           " is not a rank of this job (0.." + std::to_string(c.size() - 1) + ")");
  }
}

template <typename Opts>
Opts with_timeout(const Communicator& c, const char* op, Opts o) {
  if (o.timeout.count() < 0) {
    throw_invalid_argument(where(c, op) + ": negative timeout " + std::to_string(o.timeout.count()) +
                           " ms");
  }
  if (o.timeout.count() == 0) o.timeout = c.default_timeout();
  return o;
}

}  // namespace

void allreduce(Communicator& comm, const AllreduceOptions& opts) {
  need_buffer(comm, "allreduce", opts.output, opts.count, "output");
  AllreduceOptions o = with_timeout(comm, "allreduce", opts);
  if (o.input == nullptr) o.input = o.output;
  if (comm.size() == 1 && comm.host_buffers()) {
    // Every op of one rank's values is those values: no backend call (a
    // 1-rank job's gradient sync took 0.26-0.33 ms a step through MPI's
    // no-op allreduce and the averaging pass). Device buffers go to the
    // backend, which copies on its stream.
    if (o.input != o.output) std::memmove(o.output, o.input, o.count * dtype_size(o.dtype));
    return;
  }
  const auto start = SteadyClock::now();
  comm.do_allreduce(o);
  comm.record_allreduce(o.count * dtype_size(o.dtype), SteadyClock::now() - start);
}

void Communicator::record_allreduce(size_t bytes, SteadyClock::duration took) {
  std::string path = algorithm(OpKind::kAllreduce, bytes);
  path = path.substr(0, path.find(':'));
  if (path == "hier") path = "hierarchical";
  std::lock_guard<std::mutex> lk(paths_mu_);
  PathTotals& t = paths_[path];
  ++t.calls;
  t.bytes += bytes;
  t.seconds += std::chrono::duration<double>(took).count();
}

std::map<std::string, Communicator::PathTotals> Communicator::allreduce_paths() const {
  std::lock_guard<std::mutex> lk(paths_mu_);
  return paths_;
}

bool try_allreduce_segments(Communicator& comm, const AllreduceSegmentsOptions& opts) {
  for (const auto& seg : opts.segments) {
    need_buffer(comm, "allreduce", seg.data, seg.count, "segment");
  }
  if (comm.size() == 1) return true;  // in place, and one rank's values are the result
  const auto start = SteadyClock::now();
  if (!comm.do_allreduce_segments(with_timeout(comm, "allreduce", opts))) return false;
  size_t count = 0;
  for (const auto& seg : opts.segments) count += seg.count;
  comm.record_allreduce(count * dtype_size(opts.dtype), SteadyClock::now() - start);
  return true;
}

void broadcast(Communicator& comm, const BroadcastOptions& opts) {
  need_buffer(comm, "broadcast", opts.buffer, opts.count, "buffer");
  need_rank(comm, "broadcast", opts.root, "root");
  comm.do_broadcast(with_timeout(comm, "broadcast", opts));
}

void allgather(Communicator& comm, const AllgatherOptions& opts) {
  need_buffer(comm, "allgather", opts.input, opts.count, "input");
  need_buffer(comm, "allgather", opts.output, opts.count, "output");
  // An allgatherv with equal counts: one path per backend for both.
  AllgathervOptions v;
  v.input = opts.input;
  v.output = opts.output;
  v.counts.assign(static_cast<size_t>(comm.size()), opts.count);
  v.dtype = opts.dtype;
  v.tag = opts.tag;
  v.timeout = opts.timeout;
  comm.do_allgatherv(with_timeout(comm, "allgather", v));
}

void allgatherv(Communicator& comm, const AllgathervOptions& opts) {
  if (opts.counts.size() != static_cast<size_t>(comm.size())) {
    throw_invalid_argument(where(comm, "allgatherv") + ": counts has " +
                           std::to_string(opts.counts.size()) + " entries, need one per rank (" +
                           std::to_string(comm.size()) + ")");
  }
  size_t total = 0;
  for (size_t c : opts.counts) total += c;
  need_buffer(comm, "allgatherv", opts.input, opts.counts[comm.rank()], "input");
  need_buffer(comm, "allgatherv", opts.output, total, "output");
  comm.do_allgatherv(with_timeout(comm, "allgatherv", opts));
}

void reduce_scatter(Communicator& comm, const ReduceScatterOptions& opts) {
  if (opts.counts.empty()) {
    need_buffer(comm, "reduce_scatter", opts.input, opts.count, "input");
    need_buffer(comm, "reduce_scatter", opts.output, opts.count, "output");
    comm.do_reduce_scatter(with_timeout(comm, "reduce_scatter", opts));
    return;
  }
  if (opts.counts.size() != static_cast<size_t>(comm.size())) {
    throw_invalid_argument(where(comm, "reduce_scatter") + ": counts has " + std::to_string(opts.counts.size()) +
                           " entries, need one per rank (" + std::to_string(comm.size()) + ")");
  }
  size_t total = 0;
  for (size_t c : opts.counts) total += c;
  need_buffer(comm, "reduce_scatter", opts.input, total, "input");
  need_buffer(comm, "reduce_scatter", opts.output, opts.counts[static_cast<size_t>(comm.rank())], "output");
  comm.do_reduce_scatter_v(with_timeout(comm, "reduce_scatter", opts));
}

void Communicator::do_reduce_scatter_v(const ReduceScatterOptions& o) {
  const int n = size_;
  const size_t es = dtype_size(o.dtype);
  std::vector<size_t> offset(static_cast<size_t>(n) + 1, 0);
  for (int p = 0; p < n; ++p) offset[p + 1] = offset[p] + o.counts[p];
  const size_t mine = o.counts[rank_];
  const auto* in = static_cast<const char*>(o.input);
  // Block q of rank q's input lands at q * mine (our own stays in input).
  std::vector<char> got(static_cast<size_t>(n) * mine * es);
  // The schedule of do_alltoall (its comment says why it cannot deadlock);
  // an empty block is neither sent nor awaited (every rank knows the counts).
  for (int k = 1; k < n; ++k) {
    const int to = (rank_ + k) % n;
    const int from = (rank_ - k + n) % n;
    exchange_step(k, in + offset[to] * es, o.counts[to] * es, got.data() + from * mine * es, mine * es, o.tag,
                  o.timeout);
  }
  std::vector<const void*> blocks;
  for (int q = 0; q < n; ++q) blocks.push_back(q == rank_ ? in + offset[q] * es : got.data() + q * mine * es);
  reduce_in_order(o.output, blocks, mine, o.dtype, o.op);
}

std::vector<std::int64_t> allgather_value(Communicator& comm, std::int64_t value) {
  std::vector<std::int64_t> all(static_cast<size_t>(comm.size()));
  AllgatherOptions o;
  o.input = &value;
  o.output = all.data();
  o.count = 1;
  o.dtype = DataType::kInt64;
  allgather(comm, o);
  return all;
}

void alltoall(Communicator& comm, const AlltoallOptions& opts) {
  const size_t total = opts.count * static_cast<size_t>(comm.size());
  need_buffer(comm, "alltoall", opts.input, total, "input");
  need_buffer(comm, "alltoall", opts.output, total, "output");
  const size_t bytes = total * dtype_size(opts.dtype);
  const auto* in = static_cast<const char*>(opts.input);
  const auto* out = static_cast<const char*>(opts.output);
  if (bytes > 0 && in < out + bytes && out < in + bytes) {
    throw_invalid_argument(where(comm, "alltoall") +
                           ": input and output overlap; pass separate buffers");
  }
  comm.do_alltoall(with_timeout(comm, "alltoall", opts));
}

void Communicator::do_alltoall(const AlltoallOptions& o) {
  if (o.count == 0) return;  // every rank passes the same count
  const size_t block = o.count * dtype_size(o.dtype);
  const auto* in = static_cast<const char*>(o.input);
  auto* out = static_cast<char*>(o.output);
  std::memcpy(out + rank_ * block, in + rank_ * block, block);
  // Step k: send block (rank+k) to rank+k, receive block (rank-k) from
  // rank-k. Those transfers form cycles of size/gcd(size, k) ranks; in each
  // cycle its lowest rank (rank < gcd) receives first and the others send
  // first, so blocking sends (MPI's rendezvous protocol) cannot wait on each
  // other in a circle: the cycle unwinds from its lowest rank.
  const int n = size_;
  for (int k = 1; k < n; ++k) {
    exchange_step(k, in + ((rank_ + k) % n) * block, block, out + ((rank_ - k + n) % n) * block, block, o.tag,
                  o.timeout);
  }
}

void Communicator::exchange_step(int k, const void* send, size_t send_bytes, void* recv, size_t recv_bytes,
                                 std::uint32_t tag, Millis timeout) {
  const int n = size_;
  SendOptions s;
  s.data = send;
  s.count = send_bytes;
  s.peer = (rank_ + k) % n;
  s.tag = tag;
  s.timeout = timeout;
  RecvOptions r;
  r.data = recv;
  r.count = recv_bytes;
  r.peer = (rank_ - k + n) % n;
  r.tag = tag;
  r.timeout = timeout;
  int a = n, b = k;  // gcd(n, k): the cycles' count, and their lowest ranks
  while (b != 0) {
    const int t = a % b;
    a = b;
    b = t;
  }
  const bool recv_first = rank_ < a;
  if (recv_first && r.count > 0) do_recv(r);
  if (s.count > 0) do_send(s);
  if (!recv_first && r.count > 0) do_recv(r);
}

void Communicator::do_barrier(const BarrierOptions& o) {
  // A one-byte allreduce: every backend's allreduce already waits politely,
  // within the timeout, and names the ranks it waited for.
  std::uint8_t token = 0;
  AllreduceOptions a;
  a.input = &token;
  a.output = &token;
  a.count = 1;
  a.dtype = DataType::kUInt8;
  a.op = ReduceOp::kMax;
  a.tag = o.tag;
  a.timeout = o.timeout;
  do_allreduce(a);
}

void barrier(Communicator& comm, const BarrierOptions& opts) {
  const BarrierOptions o = with_timeout(comm, "barrier", opts);
  try {
    comm.do_barrier(o);
  } catch (const Error& e) {
    throw Error(e.code(), "barrier: " + std::string(e.what()));
  }
}

void send(Communicator& comm, const SendOptions& opts) {
  need_buffer(comm, "send", opts.data, opts.count, "data");
  need_rank(comm, "send", opts.peer, "peer");
  if (opts.peer == comm.rank()) {
    throw_invalid_argument(where(comm, "send") + ": a rank cannot send to itself");
  }
  comm.do_send(with_timeout(comm, "send", opts));
}

void recv(Communicator& comm, const RecvOptions& opts) {
  need_buffer(comm, "recv", opts.data, opts.count, "data");
  need_rank(comm, "recv", opts.peer, "peer");
  if (opts.peer == comm.rank()) {
    throw_invalid_argument(where(comm, "recv") + ": a rank cannot receive from itself");
  }
  comm.do_recv(with_timeout(comm, "recv", opts));
}

}  // namespace hpct::comm
