#include "bench/engine_bench.h"

#include <torch/torch.h>

#include <algorithm>
#include <nlohmann/json.hpp>

#include "core/stats.h"
#include "engine/engine.h"
#include "train/models.h"

namespace hpct::bench {
namespace {

double seconds_since(SteadyClock::time_point t) {
  return std::chrono::duration<double>(SteadyClock::now() - t).count();
}

}  // namespace

void run_engine_bench(comm::Communicator& comm, const Config& config, const Logger& logger,
                      const EngineBenchOptions& opts, RawAllreduce* raw,
                      const std::function<void(const nlohmann::json&)>& emit) {
  const auto engine_options = engine::EngineOptions::from_config(config);
  for (const auto& model_name : opts.models) {
    torch::manual_seed(0);
    auto model = train::make_model(model_name, 3);
    // Backward order: the last layer's gradients are ready first.
    std::vector<std::pair<std::string, std::vector<std::int64_t>>> grads;
    for (const auto& p : model->named_parameters()) {
      grads.emplace_back(
          p.key(), std::vector<std::int64_t>(p.value().sizes().begin(), p.value().sizes().end()));
    }
    std::reverse(grads.begin(), grads.end());
    std::int64_t total = 0;
    for (const auto& g : grads) {
      std::int64_t n = 1;
      for (auto d : g.second) n *= d;
      total += n;
    }
    for (const auto& layout : opts.layouts) {
      for (const auto& op_name : opts.ops) {
        const comm::ReduceOp op = comm::parse_reduce_op(op_name);
        torch::Tensor flat = torch::ones({total}, torch::kFloat);
        std::vector<torch::Tensor> tensors;
        std::int64_t off = 0;
        for (const auto& g : grads) {
          std::int64_t n = 1;
          for (auto d : g.second) n *= d;
          tensors.push_back(layout == "flat" ? flat.narrow(0, off, n).view(g.second)
                                             : torch::ones(g.second, torch::kFloat));
          off += n;
        }
        std::vector<std::string> names;
        for (const auto& g : grads) names.push_back("grad/" + g.first);
        std::vector<float> raw_buf(static_cast<size_t>(total), 1.0f);
        std::vector<double> engine_s, raw_s, ratios;
        engine::Engine::Stats last{};
        for (int b = 0; b < opts.blocks; ++b) {
          std::vector<double> eb, rb;
          {
            engine::Engine e(comm, engine_options, logger);
            for (int it = -1; it < opts.iters; ++it) {
              auto t0 = SteadyClock::now();
              // As DistributedOptimizer does: names built once, one handle each.
              std::vector<engine::Handle> hs;
              hs.reserve(grads.size());
              for (size_t i = 0; i < grads.size(); ++i) {
                engine::TensorRef ref{tensors[i].data_ptr(), comm::DataType::kFloat32,
                                      grads[i].second, nullptr};
                hs.push_back(e.allreduce_async(names[i], std::move(ref), op));
              }
              for (auto& h : hs) h.wait();
              if (it >= 0) eb.push_back(seconds_since(t0));
            }
            last = e.stats();
          }
          if (raw != nullptr) {
            raw->run(raw_buf.data(), raw_buf.size());  // warm-up
            for (int it = 0; it < opts.iters; ++it) {
              auto t0 = SteadyClock::now();
              raw->run(raw_buf.data(), raw_buf.size());
              rb.push_back(seconds_since(t0));
            }
          }
          for (size_t i = 0; i < eb.size(); ++i) {
            engine_s.push_back(eb[i]);
            if (i < rb.size()) {
              raw_s.push_back(rb[i]);
              ratios.push_back(eb[i] / rb[i]);
            }
          }
        }
        if (comm.rank() != 0) continue;
        nlohmann::json j;
        j["bench"] = "engine";
        j["model"] = model_name;
        j["layout"] = layout;
        j["op"] = comm::reduce_op_name(op);
        j["backend"] = comm.backend_name();
        j["np"] = comm.size();
        j["tensors"] = grads.size();
        j["bytes"] = total * 4;
        j["engine_ms"] = median(engine_s) * 1e3;
        j["engine_min_ms"] = *std::min_element(engine_s.begin(), engine_s.end()) * 1e3;
        if (!raw_s.empty()) {
          j["raw"] = raw->name();
          j["raw_ms"] = median(raw_s) * 1e3;
          j["raw_min_ms"] = *std::min_element(raw_s.begin(), raw_s.end()) * 1e3;
          j["ratio"] = median(ratios);  // median of paired ratios
        }
        j["fusion_bytes"] = engine_options.fusion_bytes;
        j["cycle_ms"] = engine_options.cycle_ms;
        j["compression"] = engine::compression_name(engine_options.compression);
        j["collectives_last_block"] = last.collectives;
        j["in_place_bytes_last_block"] = last.in_place_bytes;
        j["packed_bytes_last_block"] = last.packed_bytes;
        emit(j);
      }
    }
  }
}

}  // namespace hpct::bench
