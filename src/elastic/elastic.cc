#include "elastic/elastic.h"

#include <torch/torch.h>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>

#include "core/error.h"
#include "elastic/rendezvous.h"
#include "engine/engine.h"
#include "torch/context.h"

namespace hpct::elastic {
namespace {

torch::Tensor position_tensor(const State& s) {
  return torch::tensor({s.epoch, s.batch, s.step, s.samples}, torch::kLong);
}

torch::Tensor bytes_tensor(const std::string& s) {
  auto t = torch::empty({static_cast<std::int64_t>(s.size())}, torch::kByte);
  if (!s.empty()) std::memcpy(t.data_ptr(), s.data(), s.size());
  return t;
}

std::string tensor_string(const torch::Tensor& t) {
  auto c = t.contiguous();
  return std::string(static_cast<const char*>(c.data_ptr()), static_cast<size_t>(c.numel()));
}

bool retryable(const Error& e) {
  // A peer's death, a peer's engine shutdown (its process is ending) and
  // an operation that timed out (a host gone without a FIN) are what a new
  // world can cure; anything else is the training function's own error.
  return e.code() == ErrorCode::kPeerFailure || e.code() == ErrorCode::kTimeout;
}

}  // namespace

State::State(torch::nn::Module& model, torch::optim::Optimizer& optimizer)
    : model_(&model), optimizer_(&optimizer) {}

State::State(Payload payload) : payload_(std::move(payload)) {
  if (!payload_.save || !payload_.load)
    throw_invalid_argument("elastic state: a payload needs both a save and a load function");
}

State::~State() = default;

std::string State::serialize() const {
  torch::serialize::OutputArchive ar;
  if (model_ != nullptr) {
    for (const auto& p : model_->named_parameters())
      ar.write("model/p/" + p.key(), p.value().detach());
    for (const auto& b : model_->named_buffers()) ar.write("model/b/" + b.key(), b.value(), true);
    torch::serialize::OutputArchive opt;
    optimizer_->save(opt);
    ar.write("optimizer", opt);
  } else {
    ar.write("payload", bytes_tensor(payload_.save()));
  }
  ar.write("position", position_tensor(*this));
  std::string names;
  std::vector<double> values;
  for (const auto& [k, v] : extras) {
    names += k + '\n';
    values.push_back(v);
  }
  ar.write("extras/names", bytes_tensor(names));
  ar.write("extras/values", torch::tensor(values, torch::kDouble));
  std::ostringstream out;
  ar.save_to(out);
  return out.str();
}

void State::deserialize(const std::string& bytes) {
  torch::serialize::InputArchive ar;
  ar.load_from(bytes.data(), bytes.size());
  if (model_ == nullptr) {
    torch::Tensor payload;
    ar.read("payload", payload);
    payload_.load(tensor_string(payload));
  } else {
    torch::NoGradGuard no_grad;
    for (auto& p : model_->named_parameters()) {
      torch::Tensor t;
      ar.read("model/p/" + p.key(), t);
      p.value().copy_(t);
    }
    for (auto& b : model_->named_buffers()) {
      torch::Tensor t;
      ar.read("model/b/" + b.key(), t, true);
      b.value().copy_(t);
    }
  }
  if (optimizer_ != nullptr) {
    torch::serialize::InputArchive opt;
    ar.read("optimizer", opt);
    optimizer_->state().clear();
    optimizer_->load(opt);
    // libtorch 1.13's load() drops the saved param group options (lr,
    // momentum, ...): read them from the same archive (as broadcast.cc does).
    torch::serialize::InputArchive groups;
    opt.read("param_groups", groups);
    for (std::size_t i = 0; i < optimizer_->param_groups().size(); ++i) {
      torch::serialize::InputArchive group, options;
      groups.read("param_groups/" + std::to_string(i), group);
      group.read("options", options);
      optimizer_->param_groups()[i].options().serialize(options);
    }
  }
  torch::Tensor pos;
  ar.read("position", pos);
  epoch = pos[0].item<std::int64_t>();
  batch = pos[1].item<std::int64_t>();
  step = pos[2].item<std::int64_t>();
  samples = pos[3].item<std::int64_t>();
  torch::Tensor names_t, values_t;
  ar.read("extras/names", names_t);
  ar.read("extras/values", values_t);
  extras.clear();
  std::istringstream names(tensor_string(names_t));
  std::string name;
  for (std::int64_t i = 0; std::getline(names, name) && i < values_t.numel(); ++i) {
    extras[name] = values_t[i].item<double>();
  }
}

void State::save() {
  saved_ = serialize();
  saved_step_ = step;
  ++commits_;
  if (file_every_ > 0 && commits_ % file_every_ == 0 && (ctx_ == nullptr || ctx_->rank() == 0)) {
    const std::string tmp = file_ + ".tmp";
    {
      std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
      f.write(saved_.data(), static_cast<std::streamsize>(saved_.size()));
      f.flush();
      if (!f) throw_io("write elastic state " + tmp, errno ? errno : EIO);
    }
    if (std::rename(tmp.c_str(), file_.c_str()) != 0)
      throw_io("rename " + tmp + " to " + file_, errno);
  }
}

void State::restore() {
  if (saved_.empty()) throw_invalid_argument("elastic state: restore() before any commit");
  deserialize(saved_);
}

void State::commit() {
  save();
  check_host_updates();
}

void State::check_host_updates() {
  if (worker_ == nullptr || ctx_ == nullptr) return;
  double newest = ctx_->rank() == 0 ? static_cast<double>(worker_->rdv_->current()) : 0.0;
  newest = hpct::allreduce(*ctx_, "elastic/generation", newest, false);
  if (newest > static_cast<double>(worker_->gen_)) {
    throw MembershipChanged{static_cast<std::int64_t>(newest), SteadyClock::now()};
  }
}

void State::sync() {
  Context& ctx = context();
  std::string bytes = ctx.rank() == 0 ? serialize() : std::string();
  torch::Tensor len = torch::tensor({static_cast<std::int64_t>(bytes.size())}, torch::kLong);
  ctx.engine()
      .broadcast_async("elastic/sync/length", tensor_ref(len, "elastic state length"), 0)
      .wait();
  torch::Tensor blob = torch::empty({len.item<std::int64_t>()}, torch::kByte);
  if (ctx.rank() == 0 && !bytes.empty()) std::memcpy(blob.data_ptr(), bytes.data(), bytes.size());
  ctx.engine().broadcast_async("elastic/sync/state", tensor_ref(blob, "elastic state"), 0).wait();
  if (ctx.rank() != 0) deserialize(tensor_string(blob));
  save();
}

void State::write_every(const std::string& path, int commits) {
  if (commits < 0) throw_invalid_argument("elastic state: write_every needs commits >= 0");
  file_ = path;
  file_every_ = path.empty() ? 0 : commits;
}

void State::on_size_change(std::function<void(int, int)> callback) {
  on_size_change_ = std::move(callback);
}

void State::on_reset(std::function<void()> callback) { on_reset_ = std::move(callback); }

Context& State::context() {
  if (ctx_ == nullptr)
    throw_invalid_argument("elastic state: no world yet (use it inside elastic::run)");
  return *ctx_;
}

std::int64_t State::committed_step() const { return saved_step_; }

Worker::Worker(const Config& config, const Logger& logger)
    : config_(config),
      logger_(logger),
      rdv_(std::make_unique<Rendezvous>(config, ProcessEnv(), logger)) {
  rdv_->announce_ready();
}

Worker::~Worker() = default;

std::int64_t Worker::id() const { return rdv_->id(); }

Context& Worker::context() {
  if (ctx_ == nullptr)
    throw_invalid_argument("elastic worker " + std::to_string(id()) +
                           " is between worlds (no generation joined)");
  return *ctx_;
}

void Worker::leave() { ctx_.reset(); }

bool Worker::join() {
  namespace proto = launch::elastic;
  leave();
  std::int64_t after = gen_;
  while (true) {
    // A little longer than the launcher waits below --min-np, so that its
    // verdict (naming the lost hosts) comes first.
    proto::Generation g = rdv_->next_generation(after, rdv_->timeout() + Millis(5000));
    after = g.gen;
    const proto::Member* me = g.find(rdv_->id());
    if (me == nullptr) {
      if (!taken_in_) continue;  // not taken in yet: wait for the next one
      gen_ = g.gen;
      reason_ = g.reason;
      logger_.info("elastic", "worker " + std::to_string(rdv_->id()) + " is not in generation " +
                                  std::to_string(g.gen) + " (" + g.reason + "); leaving the job");
      return false;
    }
    const proto::Member self = *me;
    std::optional<comm::World> world;
    try {
      world = rdv_->connect(g, self);
    } catch (const Error& e) {
      if (!retryable(e)) throw;
      logger_.warn("elastic",
                   "generation " + std::to_string(g.gen) + " did not form: " + e.what());
      rdv_->report_failure(g.gen, self.rank, e);
      continue;
    }
    if (!world) continue;  // a newer generation came while we waited for the others
    ctx_ = make_context(std::move(*world), config_, logger_);
    gen_ = g.gen;
    reason_ = g.reason;
    taken_in_ = true;
    return true;
  }
}

bool run(State& state, const std::function<void(Context&)>& train, const Config& config,
         const Logger& logger) {
  Worker worker(config, logger);
  return run(state, worker, train);
}

bool run(State& state, Worker& worker, const std::function<void(Context&)>& train) {
  struct Detach {
    State& s;
    ~Detach() {
      s.ctx_ = nullptr;
      s.worker_ = nullptr;
      s.worker_id_ = -1;
    }
  } detach{state};
  state.worker_ = &worker;
  state.worker_id_ = worker.id();
  if (state.saved_.empty()) state.save();
  int size = 0;
  SteadyClock::time_point change_start = SteadyClock::now();
  std::int64_t rollback = 0;
  bool first_world = true;
  while (true) {
    if (!worker.joined() && !worker.join()) return false;
    Context& ctx = worker.context();
    Logger log = worker.logger_.with_rank(ctx.rank());
    state.ctx_ = &ctx;
    const std::int64_t gen = worker.generation();
    std::int64_t step_before = state.step;
    try {
      if (!first_world && state.on_reset_) state.on_reset_();
      first_world = false;
      state.sync();
      const int old_size = size;
      size = ctx.size();
      Change c;
      c.generation = gen;
      c.reason = worker.reason();
      c.old_size = old_size;
      c.new_size = size;
      c.rollback_steps = rollback + std::max<std::int64_t>(0, step_before - state.step);
      c.seconds = std::chrono::duration<double>(SteadyClock::now() - change_start).count();
      state.last_change_ = c;
      if (ctx.rank() == 0) {
        char secs[32];
        std::snprintf(secs, sizeof secs, "%.2f", c.seconds);
        log.info("elastic", "generation " + std::to_string(gen) + " (" + c.reason + "): size " +
                                std::to_string(old_size) + " -> " + std::to_string(size) +
                                ", rolled back " + std::to_string(c.rollback_steps) +
                                " steps to step " + std::to_string(state.step) + ", " + secs +
                                " s from the change to training again");
      }
      if (old_size != size && state.on_size_change_) state.on_size_change_(old_size, size);
      rollback = 0;
      train(ctx);
      worker.rdv_->mark_done();
      return true;
    } catch (const MembershipChanged& m) {
      change_start = m.at;
      rollback = 0;
    } catch (const Error& e) {
      if (!retryable(e)) throw;
      change_start = SteadyClock::now();
      const std::int64_t failed_at = state.step;
      worker.rdv_->report_failure(gen, ctx.rank(), e);
      log.warn("elastic", "generation " + std::to_string(gen) + " failed at step " +
                              std::to_string(failed_at) + ": " + e.what());
      state.ctx_ = nullptr;
      worker.leave();  // the engine and the broken communicator go first
      state.restore();
      rollback = failed_at - state.step;
    }
    state.ctx_ = nullptr;
    worker.leave();
  }
}

}  // namespace hpct::elastic
