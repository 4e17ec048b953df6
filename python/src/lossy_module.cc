#include "lossy_module.h"

#include <pybind11/stl.h>
#include <torch/csrc/utils/pybind.h>

#include <memory>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "core/error.h"
#include "runtime.h"
#include "torch/context.h"
#include "torch/gradient_compressor.h"

namespace py = pybind11;

namespace hpct::py {
namespace {

// One optimizer's compressor over the Runtime's engine (the current world's
// in an elastic job). Called from the training thread only.
class LossyCompressor {
 public:
  // mode: powersgd[:RANK] or int8. start_step < 0 and min_rate <= 0 take
  // HPCT_COMPRESSION_START_STEP and HPCT_COMPRESSION_MIN_RATE.
  LossyCompressor(std::shared_ptr<Runtime> runtime, const std::string& mode,
                  std::int64_t start_step, double min_rate)
      : runtime_(std::move(runtime)) {
    auto spec = parse_lossy(mode);
    if (!spec)
      throw_invalid_argument("LossyCompressor: '" + mode + "' is not powersgd[:RANK] or int8");
    const Config& config = runtime_->context().config();
    spec->start_step = start_step >= 0 ? start_step : config.compression_start_step;
    spec->min_rate = min_rate > 0 ? min_rate : config.compression_min_rate;
    compressor_ = make_gradient_compressor(*spec);
  }

  // Collective; the caller releases the GIL. Every tensor must be a
  // contiguous CPU or CUDA tensor (the optimizer makes .grad so); each is reduced
  // in place.
  void reduce(const std::vector<std::pair<std::string, torch::Tensor>>& grads, bool average) {
    std::vector<GradSlot> slots;
    slots.reserve(grads.size());
    for (const auto& [name, t] : grads) {
      if (!t.defined() || !(t.device().is_cpu() || t.device().is_cuda()) || !t.is_contiguous() ||
          t.is_sparse()) {
        throw_invalid_argument("the gradient of " + name +
                               " must be a dense, contiguous CPU or CUDA tensor for " +
                               compressor_->spec().name() + " compression");
      }
      slots.push_back(GradSlot{name, t});
    }
    compressor_->reduce(runtime_->context().engine(), slots, average);
  }

  ::py::bytes state(bool residuals) const {
    torch::serialize::OutputArchive ar;
    compressor_->save(ar, residuals);
    std::ostringstream ss;
    ar.save_to(ss);
    return ::py::bytes(ss.str());
  }

  void load_state(const std::string& bytes, bool residuals) {
    torch::serialize::InputArchive ar;
    std::istringstream ss(bytes);
    ar.load_from(ss);
    compressor_->load(ar);
    if (!residuals) compressor_->drop_residuals();
  }

  std::int64_t step() const { return compressor_->step(); }
  std::string name() const { return compressor_->spec().name(); }
  std::int64_t start_step() const { return compressor_->spec().start_step; }
  double min_rate() const { return compressor_->spec().min_rate; }

 private:
  std::shared_ptr<Runtime> runtime_;
  std::unique_ptr<GradientCompressor> compressor_;
};

}  // namespace

void bind_lossy(::py::module_& m) {
  ::py::class_<LossyCompressor>(m, "LossyCompressor")
      .def(::py::init<std::shared_ptr<Runtime>, const std::string&, std::int64_t, double>(),
           ::py::arg("runtime"), ::py::arg("mode"), ::py::arg("start_step") = -1,
           ::py::arg("min_rate") = 0.0)
      // The list is converted with the GIL held; the reduction runs without it.
      .def("reduce", &LossyCompressor::reduce, ::py::arg("grads"), ::py::arg("average"),
           ::py::call_guard<::py::gil_scoped_release>())
      .def("state", &LossyCompressor::state, ::py::arg("residuals") = true)
      .def(
          "load_state",
          [](LossyCompressor& c, const ::py::bytes& b, bool residuals) {
            c.load_state(std::string(b), residuals);
          },
          ::py::arg("state"), ::py::arg("residuals") = true)
      .def_property_readonly("step", &LossyCompressor::step)
      .def_property_readonly("name", &LossyCompressor::name)
      .def_property_readonly("start_step", &LossyCompressor::start_step)
      .def_property_readonly("min_rate", &LossyCompressor::min_rate);
}

}  // namespace hpct::py
