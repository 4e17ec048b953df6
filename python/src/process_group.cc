#include "process_group.h"

#include <ATen/ATen.h>
#include <ATen/core/ivalue.h>

#include "core/error.h"

namespace hpct::py {
namespace {

std::string op_name(const c10d::ReduceOp& op) {
  switch (static_cast<c10d::ReduceOp::RedOpType>(op)) {
    case c10d::ReduceOp::SUM:
      return "sum";
    case c10d::ReduceOp::AVG:
      return "avg";
    case c10d::ReduceOp::MIN:
      return "min";
    case c10d::ReduceOp::MAX:
      return "max";
    case c10d::ReduceOp::PRODUCT:
      return "product";
    default:
      throw_invalid_argument(
          "the hpctrain backend supports SUM, AVG, MIN, MAX and PRODUCT, not op " +
          std::to_string(static_cast<int>(static_cast<c10d::ReduceOp::RedOpType>(op))));
  }
}

// CPU and CUDA tensors (a CUDA one through the engine's device path:
// ordered after the current stream, its result ordered back on it).
void check_device(const at::Tensor& t, const char* what) {
  if (!t.device().is_cpu() && !t.device().is_cuda()) {
    throw_invalid_argument(std::string("hpctrain backend ") + what + ": tensor on " +
                           t.device().str() + "; hpctrain moves CPU and CUDA tensors");
  }
}

}  // namespace

EngineWork::EngineWork(c10d::OpType type, std::vector<at::Tensor> outputs)
    : Work(-1, type),
      outputs_(std::move(outputs)),
      future_(
          c10::make_intrusive<c10::ivalue::Future>(c10::ListType::create(c10::TensorType::get()))) {
}

bool EngineWork::isCompleted() { return future_->completed(); }
bool EngineWork::isSuccess() const { return future_->completed() && !future_->hasError(); }
std::exception_ptr EngineWork::exception() const {
  return future_->completed() && future_->hasError() ? future_->exception_ptr() : nullptr;
}

bool EngineWork::wait(
    std::chrono::milliseconds /*timeout: the engine's HPCT_TIMEOUT_S bounds it*/) {
  future_->wait();
  if (future_->hasError()) std::rethrow_exception(future_->exception_ptr());
  return true;
}

void EngineWork::finish(std::exception_ptr error) {
  if (error) {
    future_->setError(error);
  } else {
    future_->markCompleted(c10::IValue(outputs_));
  }
}

EngineBackend::EngineBackend(std::shared_ptr<Runtime> runtime, int rank, int size, int index)
    : Backend(rank, size),
      runtime_(std::move(runtime)),
      prefix_("pg" + std::to_string(index) + "/") {
  if (rank != runtime_->rank() || size != runtime_->size()) {
    throw_invalid_argument(
        "init_process_group(\"hpctrain\") got rank " + std::to_string(rank) + " of " +
        std::to_string(size) + " but hpctrain's launcher made this process rank " +
        std::to_string(runtime_->rank()) + " of " + std::to_string(runtime_->size()) +
        "; leave rank and world_size unset (or RANK/WORLD_SIZE as the launcher set them); "
        "groups of a subset of the ranks are not supported by this backend");
  }
  completer_ = std::thread([this] { complete_loop(); });
}

EngineBackend::~EngineBackend() {
  {
    std::lock_guard<std::mutex> lk(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  completer_.join();
}

std::string EngineBackend::next_name(const char* op) {
  return prefix_ + op + "/" + std::to_string(seq_++);
}

std::string EngineBackend::stable_name(const std::string& op, const at::Tensor& t,
                                            const std::string& detail) {
  std::string signature = prefix_ + op + "/" + std::string(c10::toString(t.scalar_type())) + "/" +
                          detail + "/" + std::to_string(t.numel());
  std::uint64_t n = signature_count_[signature]++;
  std::string name = signature + "/" + std::to_string(n % kNameSlots);
  auto it = name_holder_.find(name);
  if (it != name_holder_.end()) {
    if (!it->second.poll()) {
      try {
        it->second.wait();
      } catch (...) {
        // Its own Work reports the error; this name is free either way.
      }
    }
    name_holder_.erase(it);
  }
  return name;
}

void EngineBackend::hold(const Operation& op) { name_holder_[op.name()] = op.handle(); }

c10::intrusive_ptr<c10d::Work> EngineBackend::enqueue(c10d::OpType type,
                                                           std::vector<at::Tensor> outputs,
                                                           std::vector<Operation> ops,
                                                           std::function<void()> after) {
  auto work = c10::make_intrusive<EngineWork>(type, std::move(outputs));
  {
    std::lock_guard<std::mutex> lk(mu_);
    queue_.push_back(Pending{std::move(ops), std::move(after), work});
  }
  cv_.notify_one();
  return work;
}

void EngineBackend::complete_loop() {
  std::unique_lock<std::mutex> lk(mu_);
  for (;;) {
    cv_.wait(lk, [&] { return stop_ || !queue_.empty(); });
    if (queue_.empty()) return;  // stop_, nothing left
    Pending p = std::move(queue_.front());
    queue_.pop_front();
    lk.unlock();
    std::exception_ptr error;
    for (auto& op : p.ops) {
      try {
        op.wait();
      } catch (...) {
        if (!error) error = std::current_exception();
      }
    }
    if (!error && p.after) {
      try {
        p.after();
      } catch (...) {
        error = std::current_exception();
      }
    }
    p.work->finish(error);
    lk.lock();
  }
}

c10::intrusive_ptr<c10d::Work> EngineBackend::allreduce(std::vector<at::Tensor>& tensors,
                                                             const c10d::AllreduceOptions& opts) {
  const std::string op = op_name(opts.reduceOp);
  std::vector<Operation> ops;
  std::vector<std::pair<at::Tensor, at::Tensor>> copies;  // (target, contiguous stand-in)
  for (auto& t : tensors) {
    check_device(t, "allreduce");
    at::Tensor send = t.is_contiguous() ? t : t.contiguous();
    if (!send.is_same(t)) copies.emplace_back(t, send);
    std::lock_guard<std::mutex> lk(submit_mu_);
    ops.push_back(runtime_->allreduce(send, stable_name("allreduce", send, op), op, ""));
    hold(ops.back());
  }
  std::function<void()> after;
  if (!copies.empty()) {
    after = [copies] {
      for (auto& [target, send] : copies) target.copy_(send);
    };
  }
  return enqueue(c10d::OpType::ALLREDUCE, tensors, std::move(ops), std::move(after));
}

c10::intrusive_ptr<c10d::Work> EngineBackend::allreduce_coalesced(
    std::vector<at::Tensor>& tensors, const c10d::AllreduceCoalescedOptions& opts) {
  c10d::AllreduceOptions o;
  o.reduceOp = opts.reduceOp;
  o.timeout = opts.timeout;
  return allreduce(tensors, o);
}

c10::intrusive_ptr<c10d::Work> EngineBackend::broadcast(std::vector<at::Tensor>& tensors,
                                                             const c10d::BroadcastOptions& opts) {
  std::vector<Operation> ops;
  std::vector<std::pair<at::Tensor, at::Tensor>> copies;
  for (auto& t : tensors) {
    check_device(t, "broadcast");
    at::Tensor send = t.is_contiguous() ? t : t.contiguous();
    if (!send.is_same(t)) copies.emplace_back(t, send);
    std::lock_guard<std::mutex> lk(submit_mu_);
    ops.push_back(runtime_->broadcast(send,
                                      stable_name("broadcast", send, std::to_string(opts.rootRank)),
                                      static_cast<int>(opts.rootRank)));
    hold(ops.back());
  }
  std::function<void()> after;
  if (!copies.empty()) {
    after = [copies] {
      for (auto& [target, send] : copies) target.copy_(send);
    };
  }
  return enqueue(c10d::OpType::BROADCAST, tensors, std::move(ops), std::move(after));
}

c10::intrusive_ptr<c10d::Work> EngineBackend::allgather(
    std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,
    const c10d::AllgatherOptions& /*opts*/) {
  if (inputs.size() != outputs.size()) {
    throw_invalid_argument("hpctrain backend allgather: " + std::to_string(inputs.size()) +
                           " inputs but " + std::to_string(outputs.size()) + " output lists");
  }
  std::vector<Operation> ops;
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    check_device(inputs[i], "allgather");
    if (outputs[i].size() != static_cast<std::size_t>(getSize())) {
      throw_invalid_argument("hpctrain backend allgather: the output list holds " +
                             std::to_string(outputs[i].size()) + " tensors, one per rank (" +
                             std::to_string(getSize()) + ") expected");
    }
    // The engine gathers rows; a flat view makes every rank's tensor one block.
    at::Tensor flat = inputs[i].contiguous().reshape({1, -1});
    std::lock_guard<std::mutex> lk(submit_mu_);
    ops.push_back(runtime_->allgather(flat, next_name("allgather")));
  }
  std::vector<at::Tensor> flat_outputs;
  for (auto& list : outputs) flat_outputs.insert(flat_outputs.end(), list.begin(), list.end());
  auto after = [ops, outputs]() mutable {
    for (std::size_t i = 0; i < ops.size(); ++i) {
      at::Tensor all = ops[i].wait();  // done: returns at once
      for (std::size_t r = 0; r < outputs[i].size(); ++r) {
        outputs[i][r].copy_(all[static_cast<std::int64_t>(r)].view(outputs[i][r].sizes()));
      }
    }
  };
  return enqueue(c10d::OpType::ALLGATHER, flat_outputs, std::move(ops), std::move(after));
}

c10::intrusive_ptr<c10d::Work> EngineBackend::_allgather_base(
    at::Tensor& output, at::Tensor& input, const c10d::AllgatherOptions& /*opts*/) {
  check_device(input, "_allgather_base");
  at::Tensor flat = input.contiguous().reshape({1, -1});
  std::vector<Operation> ops;
  {
    std::lock_guard<std::mutex> lk(submit_mu_);
    ops.push_back(runtime_->allgather(flat, next_name("allgather")));
  }
  auto after = [ops, output]() mutable {
    at::Tensor all = ops[0].wait();
    output.copy_(all.view(output.sizes()));
  };
  return enqueue(c10d::OpType::_ALLGATHER_BASE, {output}, std::move(ops), std::move(after));
}

c10::intrusive_ptr<c10d::Work> EngineBackend::barrier(const c10d::BarrierOptions& /*opts*/) {
  at::Tensor token = at::zeros({1}, at::kFloat);
  std::vector<Operation> ops;
  {
    std::lock_guard<std::mutex> lk(submit_mu_);
    ops.push_back(runtime_->allreduce(token, stable_name("barrier", token, "sum"), "sum", "none"));
    hold(ops.back());
  }
  return enqueue(c10d::OpType::BARRIER, {}, std::move(ops), nullptr);
}

}  // namespace hpct::py
