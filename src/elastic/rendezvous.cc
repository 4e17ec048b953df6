#include "elastic/rendezvous.h"

#include <algorithm>
#include <thread>

#include "core/clock.h"

namespace hpct::elastic {

namespace proto = launch::elastic;

namespace {

constexpr Millis kPoll{20};

std::int64_t parse_int(const std::string& text, const std::string& what) {
  try {
    size_t used = 0;
    std::int64_t v = std::stoll(text, &used);
    if (used == text.size()) return v;
  } catch (const std::exception&) {
  }
  throw_invalid_argument(what + "='" + text + "' is not an integer");
}

}  // namespace

Rendezvous::Rendezvous(const Config& config, const Env& env, const Logger& logger)
    : config_(config), logger_(logger), timeout_(seconds_to_millis(config.elastic_timeout_s)) {
  auto id = env.get("HPCT_ELASTIC_ID");
  if (!id) {
    throw_invalid_argument(
        "this process is not an elastic worker (HPCT_ELASTIC_ID is not set): "
        "start it with hpctrain launch --min-np A --max-np B");
  }
  id_ = parse_int(*id, "HPCT_ELASTIC_ID");
  if (config.elastic_timeout_s <= 0) {
    throw_invalid_argument("HPCT_ELASTIC_TIMEOUT_S must be positive, got " +
                           std::to_string(config.elastic_timeout_s));
  }
  base_info_ = discover_world(env);
  if (config.store_addr.empty()) {
    throw_invalid_argument(
        "an elastic worker needs the job's store (HPCT_STORE_ADDR, set by "
        "hpctrain launch)");
  }
  job_store_ = comm::open_job_store(config, base_info_, env, &store_host_, logger_);
  store_ = std::make_shared<store::PrefixStore>(proto::kPrefix, job_store_);
}

void Rendezvous::announce_ready() {
  if (ready_announced_) return;
  store_->set(proto::ready_key(id_), "1");
  ready_announced_ = true;
}

std::int64_t Rendezvous::current() {
  if (!store_->check({proto::kCurrentKey})) return -1;
  return parse_int(store_->get(proto::kCurrentKey, timeout_), "elastic current generation");
}

proto::Generation Rendezvous::next_generation(std::int64_t after, Millis timeout) {
  const Deadline deadline(timeout);
  while (true) {
    std::int64_t now = current();
    if (now > after) {
      return proto::decode_generation(store_->get(proto::generation_key(now), timeout_));
    }
    if (deadline.expired()) {
      throw_timeout("elastic worker " + std::to_string(id_) + ": no membership generation after " +
                    std::to_string(after) + " was published within " +
                    std::to_string(timeout.count() / 1000.0).substr(0, 5) +
                    " s (HPCT_ELASTIC_TIMEOUT_S); the launcher is gone or below --min-np");
    }
    std::this_thread::sleep_for(kPoll);
  }
}

std::optional<comm::World> Rendezvous::connect(const proto::Generation& g,
                                               const proto::Member& me) {
  auto world_store = std::make_shared<store::PrefixStore>(proto::world_prefix(g.gen), store_);
  world_store->set(proto::arrived_key(me.rank), std::to_string(id_));
  std::vector<std::string> keys;
  for (const auto& m : g.members) keys.push_back(proto::arrived_key(m.rank));
  const Deadline deadline(timeout_);
  while (!world_store->check(keys)) {
    if (current() > g.gen) return std::nullopt;
    if (deadline.expired()) {
      std::string ranks, who;
      for (const auto& m : g.members) {
        if (world_store->check({proto::arrived_key(m.rank)})) continue;
        ranks += (ranks.empty() ? "" : ", ") + std::to_string(m.rank);
        who += (who.empty() ? "" : ", ") + std::string("worker ") + std::to_string(m.id) + " on " +
               m.host;
      }
      throw_timeout("elastic generation " + std::to_string(g.gen) + ": peer rank(s) [" + ranks +
                    "] did not arrive within " +
                    std::to_string(timeout_.count() / 1000.0).substr(0, 5) +
                    " s (HPCT_ELASTIC_TIMEOUT_S): " + who);
    }
    std::this_thread::sleep_for(kPoll);
  }
  comm::World w;
  w.info = base_info_;
  w.info.rank = me.rank;
  w.info.size = static_cast<int>(g.members.size());
  w.info.local_rank = me.local_rank;
  w.info.local_size = me.local_size;
  w.info.cross_rank = me.cross_rank;
  w.info.cross_size = me.cross_size;
  w.store = world_store;
  // Connecting is bounded by the elastic timeout; so are the ops, when it
  // is the shorter: a survivor must not sit out HPCT_TIMEOUT_S.
  const Millis t = std::min(timeout_, seconds_to_millis(config_.timeout_s));
  w.comm =
      comm::connect_gloo(config_, w.info, world_store, store_host_, t, logger_.with_rank(me.rank));
  return w;
}

void Rendezvous::report_failure(std::int64_t gen, int rank, const Error& e) {
  proto::FailureReport r;
  r.gen = gen;
  r.id = id_;
  r.rank = rank;
  r.blamed = proto::blamed_ranks(e.what());
  r.message = e.what();
  try {
    std::int64_t n = store_->add(proto::kReportCounterKey, 1);
    store_->set(proto::report_key(n), proto::encode_report(r));
  } catch (const Error& store_error) {
    logger_.warn("elastic",
                 std::string("cannot report the failure to the launcher: ") + store_error.what());
  }
}

void Rendezvous::mark_done() {
  try {
    store_->set(proto::done_key(id_), "1");
  } catch (const Error& e) {
    logger_.warn("elastic",
                 std::string("cannot tell the launcher this worker is done: ") + e.what());
  }
}

}  // namespace hpct::elastic
