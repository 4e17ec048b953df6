#include "engine/controller.h"

#include <algorithm>
#include <sstream>

#include "engine/fusion.h"

namespace hpct::engine {
namespace {

// Which ranks disagree, as "rank 0: allreduce float32 sum none [4, 4]; rank 1: ...".
std::string per_rank(const std::vector<Request>& rs, const std::vector<int>& ranks) {
  std::ostringstream os;
  for (size_t i = 0; i < rs.size(); ++i) {
    os << (i ? "; " : "") << "rank " << ranks[i] << ": " << rs[i].signature();
  }
  return os.str();
}

}  // namespace

Controller::Controller(comm::Communicator& comm, const ControllerOptions& options, Logger logger)
    : comm_(comm),
      options_(options),
      logger_(logger),
      cache_(options.cache_capacity),
      stall_(options.stall_warn_s, options.stall_abort_s, comm.size(), logger) {}

Controller::CachedRound Controller::cached_round(const std::vector<std::uint8_t>& bits,
                                                 bool want_full) {
  std::vector<std::uint8_t> v(bits.size() + 1);
  v[0] = want_full ? 0 : 1;
  std::copy(bits.begin(), bits.end(), v.begin() + 1);
  comm::AllreduceOptions o;
  o.output = v.data();
  o.count = v.size();
  o.dtype = comm::DataType::kUInt8;
  o.op = comm::ReduceOp::kMin;
  comm::allreduce(comm_, o);
  CachedRound r;
  r.full_needed = v[0] == 0;
  for (size_t i = 1; i < v.size(); ++i) {
    if (v[i]) r.ready.push_back(i - 1);
  }
  return r;
}

std::vector<Response> Controller::plan_cached(const std::vector<std::size_t>& ready) const {
  std::vector<const Request*> rs;
  rs.reserve(ready.size());
  for (auto i : ready) rs.push_back(&cache_.at(i));
  return plan_fusion(rs, options_.fusion_bytes);
}

ResponseList Controller::full_round(const RequestList& mine) {
  const int size = comm_.size();
  const std::string bytes = encode(mine);
  std::int64_t my_len = static_cast<std::int64_t>(bytes.size());
  std::vector<std::int64_t> lens(static_cast<size_t>(size));
  comm::AllgatherOptions lo;
  lo.input = &my_len;
  lo.output = lens.data();
  lo.count = 1;
  lo.dtype = comm::DataType::kInt64;
  comm::allgather(comm_, lo);

  comm::AllgathervOptions vo;
  std::string all;
  std::size_t total = 0;
  for (auto l : lens) {
    vo.counts.push_back(static_cast<size_t>(l));
    total += static_cast<size_t>(l);
  }
  all.resize(total);
  vo.input = bytes.data();
  vo.output = all.data();
  vo.dtype = comm::DataType::kUInt8;
  comm::allgatherv(comm_, vo);

  std::string answer;
  if (comm_.rank() == 0) {
    std::vector<RequestList> lists;
    size_t off = 0;
    for (auto l : lens) {
      lists.push_back(decode_requests(all.substr(off, static_cast<size_t>(l))));
      off += static_cast<size_t>(l);
    }
    answer = encode(coordinate(lists));
  }
  std::int64_t answer_len = static_cast<std::int64_t>(answer.size());
  comm::BroadcastOptions bo;
  bo.buffer = &answer_len;
  bo.count = 1;
  bo.dtype = comm::DataType::kInt64;
  comm::broadcast(comm_, bo);
  answer.resize(static_cast<size_t>(answer_len));
  bo.buffer = answer.data();
  bo.count = answer.size();
  bo.dtype = comm::DataType::kUInt8;
  comm::broadcast(comm_, bo);
  return decode_responses(answer);
}

ResponseList Controller::coordinate(const std::vector<RequestList>& lists) {
  const int size = comm_.size();
  const auto now = SteadyClock::now();
  ResponseList out;
  std::vector<std::string> ready;
  for (int r = 0; r < size; ++r) {
    const RequestList& l = lists[static_cast<size_t>(r)];
    if (l.shutdown && !out.shutdown) {
      out.shutdown = true;
      out.shutdown_rank = r;
    }
    for (const Request& q : l.requests) {
      auto [it, fresh] = table_.try_emplace(q.name);
      TableEntry& e = it->second;
      auto since = now - Millis(q.waited_ms);
      if (fresh || since < e.since) e.since = since;
      e.requests.push_back(q);
      e.ranks.push_back(r);
      if (static_cast<int>(e.requests.size()) == size) ready.push_back(q.name);
    }
  }

  // Take the ready entries out of the table; fusable points into `taken`.
  std::vector<TableEntry> taken;
  taken.reserve(ready.size());
  std::vector<Response> errors_and_gathers;
  std::vector<const Request*> fusable;
  for (const auto& name : ready) {
    taken.push_back(std::move(table_.at(name)));
    table_.erase(name);
    decide(name, taken.back(), errors_and_gathers, fusable);
  }
  out.responses = std::move(errors_and_gathers);
  for (auto& r : plan_fusion(fusable, options_.fusion_bytes)) out.responses.push_back(std::move(r));

  std::vector<StallCandidate> waiting;
  for (const auto& [name, e] : table_) {
    waiting.push_back({name, e.requests.front().signature(), e.ranks, e.since});
  }
  for (auto& [name, message] : stall_.check(waiting, now)) {
    Response err;
    err.type = Response::Type::kError;
    err.names = {name};
    err.error_code = ErrorCode::kTimeout;
    err.error = message;
    out.responses.push_back(std::move(err));
    table_.erase(name);
  }
  out.pending = !table_.empty();
  return out;
}

void Controller::decide(const std::string& name, TableEntry& e, std::vector<Response>& out,
                        std::vector<const Request*>& fusable) {
  const Request& first = e.requests.front();
  bool same = true;
  for (const Request& q : e.requests) {
    bool shapes_ok = q.shape == first.shape;
    if (first.kind == CollectiveKind::kAllgather) {
      shapes_ok = !q.shape.empty() && q.shape.size() == first.shape.size() &&
                  std::equal(q.shape.begin() + 1, q.shape.end(), first.shape.begin() + 1);
    }
    same = same && shapes_ok && q.kind == first.kind && q.dtype == first.dtype &&
           ((q.kind != CollectiveKind::kAllreduce && q.kind != CollectiveKind::kReduceScatter) ||
            (q.op == first.op && q.compression == first.compression)) &&
           (q.kind != CollectiveKind::kReduceScatter || q.split == first.split) &&
           (q.kind != CollectiveKind::kBroadcast || q.root == first.root);
  }
  if (!same) {
    Response err;
    err.type = Response::Type::kError;
    err.names = {name};
    err.error_code = ErrorCode::kMismatch;
    err.error = "tensor '" + name + "' differs across ranks (" + per_rank(e.requests, e.ranks) +
                "); every rank must submit it with the same kind, dtype, op and shape (and, for a reduce-scatter, the same split "
                "of its elements among the ranks)";
    out.push_back(std::move(err));
    return;
  }
  if (first.kind == CollectiveKind::kAllgather) {
    Response g;
    g.type = Response::Type::kAllgather;
    g.names = {name};
    g.dtype = first.dtype;
    g.first_dims.assign(e.requests.size(), 0);
    for (size_t i = 0; i < e.requests.size(); ++i) {
      g.first_dims[static_cast<size_t>(e.ranks[i])] = e.requests[i].shape[0];
    }
    out.push_back(std::move(g));
    return;
  }
  fusable.push_back(&first);
}

}  // namespace hpct::engine
