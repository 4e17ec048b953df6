// The engine's negotiation (controller.h's protocol): the pending tensors
// by submission order and by name, and one round: the cached phase (a bit
// per response-cache entry), then, when needed, the full phase through the
// coordinator. Every response a round yields goes to the execution
// (execution.cc).
#include <algorithm>
#include <chrono>
#include <mutex>

#include "engine/controller.h"
#include "engine/engine.h"
#include "engine/handle_state.h"

namespace hpct::engine {

void Engine::add_pending(Entry e) {
  const std::uint64_t seq = next_seq_++;
  decltype(pending_)::iterator it;
  if (!pending_spare_.empty()) {  // nodes of earlier steps: no allocation
    auto node = std::move(pending_spare_.back());
    pending_spare_.pop_back();
    node.key() = seq;
    node.mapped() = std::move(e);
    it = pending_.insert(std::move(node)).position;
  } else {
    it = pending_.emplace(seq, std::move(e)).first;
  }
  // The key views the name inside the map node, which never moves.
  const std::string_view name(it->second.req.name);
  if (!seq_spare_.empty()) {
    auto node = std::move(seq_spare_.back());
    seq_spare_.pop_back();
    node.key() = name;
    node.mapped() = seq;
    seq_of_.insert(std::move(node));
  } else {
    seq_of_.emplace(name, seq);
  }
}

void Engine::take_incoming() {
  for (auto& e : incoming_) add_pending(std::move(e));
  incoming_.clear();
  flush_requested_ = false;
  ++stats_.rounds;
}

Engine::Entry* Engine::find(std::string_view name) {
  auto it = seq_of_.find(name);
  if (it == seq_of_.end()) return nullptr;
  return &pending_.at(it->second);
}

void Engine::erase(std::string_view name) {
  auto it = seq_of_.find(name);
  if (it == seq_of_.end()) return;
  const std::uint64_t seq = it->second;
  seq_spare_.push_back(seq_of_.extract(it));  // before the node its key views
  auto node = pending_.extract(seq);          // name may view this node: unused from here
  // Release what the caller lent (the keepalive, the handle, the allocator)
  // now, as erasing would; keep the node and its buffers for a later step.
  Entry& e = node.mapped();
  e.tensor.keepalive.reset();
  e.tensor.data = nullptr;
  e.state.reset();
  e.allocate = nullptr;
  e.out = nullptr;
  if (pending_spare_.size() < kSpareNodes) pending_spare_.push_back(std::move(node));
  if (seq_spare_.size() > kSpareNodes) seq_spare_.pop_back();
}

bool Engine::cached_phase(SteadyClock::time_point start, bool shutdown_requested, bool* progress) {
  auto& cache = controller_->cache();
  // A cached tensor waiting this long for other ranks is reported in full,
  // so the coordinator's stall inspector sees it.
  const auto report_after = std::min<SteadyClock::duration>(Millis(100), idle_period_);
  std::vector<std::uint8_t> bits(cache.size(), 0);
  by_cache_index_.assign(cache.size(), nullptr);
  bool want_full = shutdown_requested;
  for (auto& [seq, e] : pending_) {
    if (e.is_reported) continue;
    auto idx = cache.lookup(e.req);
    if (idx) {
      bits[*idx] = 1;
      by_cache_index_[*idx] = &e;
      if (start - e.submitted > report_after) want_full = true;
    } else {
      want_full = true;
    }
  }
  auto cached = controller_->cached_round(bits, want_full);
  if (!cached.ready.empty()) {
    std::vector<Entry*> es;
    es.reserve(cached.ready.size());
    for (auto idx : cached.ready) {
      Entry* e = by_cache_index_[idx];
      e->reported = start;
      es.push_back(e);
    }
    execute_cached(es);
    *progress = true;
  }
  return cached.full_needed;
}

bool Engine::full_phase(bool shutdown_requested, bool* progress) {
  {
    std::lock_guard<std::mutex> lk(mu_);
    ++stats_.full_rounds;
  }
  RequestList mine;
  mine.shutdown = shutdown_requested;
  auto now = SteadyClock::now();
  for (auto& [seq, e] : pending_) {
    if (e.is_reported) continue;
    e.is_reported = true;
    e.reported = now;
    Request r = e.req;
    r.waited_ms = std::chrono::duration_cast<Millis>(now - e.submitted).count();
    mine.requests.push_back(std::move(r));
    *progress = true;
  }
  ResponseList answer = controller_->full_round(mine);
  for (const auto& r : answer.responses) execute(r, true);
  *progress = *progress || !answer.responses.empty();
  global_pending_ = answer.pending;
  if (answer.shutdown) {
    std::string who = answer.shutdown_rank == rank_
                          ? "this rank (" + std::to_string(rank_) + ")"
                          : "rank " + std::to_string(answer.shutdown_rank);
    auto code = answer.shutdown_rank == rank_ ? ErrorCode::kInvalidArgument
                                              : ErrorCode::kPeerFailure;
    std::lock_guard<std::mutex> lk(mu_);
    shutdown_requested_ = true;
    if (answer.shutdown_rank != rank_) peer_shutdown_rank_ = answer.shutdown_rank;
    broken_ = make_error(code, "the engine was shut down by " + who +
                                   " while tensors were pending");
    return true;
  }
  return false;
}

bool Engine::round(bool shutdown_requested) {
  const auto start = SteadyClock::now();
  last_round_start_ = start;
  bool progress = false;

  bool full = controller_->cache().size() == 0 || global_pending_;
  if (controller_->cache().size() > 0) {
    const bool full_needed = cached_phase(start, shutdown_requested, &progress);
    full = full || full_needed;
  }
  const bool stop = full && full_phase(shutdown_requested, &progress);
  if (!stop) straggler_.after_round(comm_);  // every few seconds, the same round on every rank
  // While tensors wait for other ranks, retry every cycle; back off (to 16
  // cycles, at most the idle period) only while rounds change nothing, so a
  // straggler's tensor waits at most that long for this rank to join.
  const Micros floor = std::max(cycle_, Micros(1000));
  pending_wait_ = progress ? floor : std::min({idle_period_, floor * 16, pending_wait_ * 2});
  last_round_end_ = SteadyClock::now();
  {
    std::lock_guard<std::mutex> lk(mu_);
    sched_.pending = !pending_.empty() || global_pending_;
    sched_.last_start = last_round_start_;
    sched_.last_end = last_round_end_;
    sched_.pending_wait = pending_wait_;
  }
  if (stop) {
    std::exception_ptr err;
    {
      std::lock_guard<std::mutex> lk(mu_);
      err = broken_;
    }
    fail_all(err);
  }
  return stop;
}

}  // namespace hpct::engine
