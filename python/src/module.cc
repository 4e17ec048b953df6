// hpctrain.torch._C: the pybind11 module under hpctrain.torch (the Python
// files beside it hold Horovod's API and the torch.distributed backend).
//
// Blocking calls (joining the job, waiting for operations) release the GIL,
// so other Python threads and autograd hooks run meanwhile. hpct::Error
// becomes hpctrain.torch.HpctError (a RuntimeError) with the same message
// and its code ("timeout", "peer-failure", ...) in .code.
#include <pybind11/chrono.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>
#include <torch/csrc/utils/pybind.h>
#include <torch/types.h>

#include "core/error.h"
#include "torch/device_tensors.h"
#include "elastic_module.h"
#include "lossy_module.h"
#include "process_group.h"
#include "runtime.h"

namespace py = pybind11;
using hpct::py::Operation;
using hpct::py::Runtime;

PYBIND11_MODULE(_C, m) {
  m.doc() = "hpctrain's engine for hpctrain.torch (use hpctrain.torch, not this module)";
#ifdef HPCT_WITH_CUDA_TENSORS
  hpct::enable_cuda_tensors();  // CUDA tensors through the engine's device path
#endif
  m.attr("CUDA_TENSORS") = py::bool_(hpct::cuda_tensor_support() != nullptr);
  m.attr("TORCH_BUILD_VERSION") = HPCT_TORCH_BUILD_VERSION;

  // The module's attributes hold the classes; the translator borrows them.
  // A bad argument (a duplicate pending name, an unknown op, ...) is also a
  // ValueError, as Horovod raises it; every other error is a RuntimeError.
  static PyObject* error_type = py::exception<hpct::Error>(m, "HpctError", PyExc_RuntimeError).ptr();
  py::object value_error = py::reinterpret_borrow<py::object>(reinterpret_cast<PyObject*>(&PyType_Type))(
      "HpctValueError",
      py::make_tuple(py::reinterpret_borrow<py::object>(error_type),
                     py::reinterpret_borrow<py::object>(PyExc_ValueError)),
      py::dict(py::arg("__module__") = "hpctrain.torch._C",
               py::arg("__doc__") = "HpctError with code invalid-argument; also a ValueError"));
  m.attr("HpctValueError") = value_error;
  static PyObject* value_error_type = value_error.ptr();
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const hpct::Error& e) {
      PyObject* type =
          e.code() == hpct::ErrorCode::kInvalidArgument ? value_error_type : error_type;
      py::object exc = py::reinterpret_borrow<py::object>(type)(e.what());
      exc.attr("code") = hpct::error_code_name(e.code());
      PyErr_SetObject(type, exc.ptr());
    }
  });

  py::class_<Operation>(m, "Operation")
      .def("poll", &Operation::poll)
      .def("wait", &Operation::wait, py::call_guard<py::gil_scoped_release>())
      .def_property_readonly("name", &Operation::name);

  // Waits for every operation (one GIL release for all) and returns their
  // output tensors; raises the first error after all are done, so no
  // operation still writes into a tensor.
  m.def(
      "wait_all",
      [](const std::vector<Operation>& ops) {
        std::vector<torch::Tensor> outs;
        outs.reserve(ops.size());
        std::exception_ptr first;
        for (const auto& op : ops) {
          try {
            outs.push_back(op.wait());
          } catch (...) {
            if (!first) first = std::current_exception();
          }
        }
        if (first) std::rethrow_exception(first);
        return outs;
      },
      py::call_guard<py::gil_scoped_release>());

  py::class_<Runtime, std::shared_ptr<Runtime>>(m, "Runtime")
      .def(py::init<>(), py::call_guard<py::gil_scoped_release>())
      .def_static("from_torch_store", &Runtime::from_torch_store, py::arg("store"), py::arg("rank"),
                  py::arg("size"), py::call_guard<py::gil_scoped_release>())
      .def("rank", &Runtime::rank)
      .def("size", &Runtime::size)
      .def("local_rank", &Runtime::local_rank)
      .def("local_size", &Runtime::local_size)
      .def("overlap_default", &Runtime::overlap_default)
      .def("allreduce", &Runtime::allreduce, py::arg("tensor"), py::arg("name"), py::arg("op"),
           py::arg("compression") = "", py::arg("stack") = "")
      .def("allgather", &Runtime::allgather, py::arg("tensor"), py::arg("name"), py::arg("stack") = "")
      .def("allgather_into", &Runtime::allgather_into, py::arg("tensor"), py::arg("name"),
           py::arg("out"))
      .def("broadcast", &Runtime::broadcast, py::arg("tensor"), py::arg("name"), py::arg("root"),
           py::arg("stack") = "")
      .def("set_phase", &Runtime::set_phase, py::arg("phase"), py::arg("step") = -1)
      .def("shutdown", &Runtime::shutdown, py::call_guard<py::gil_scoped_release>());

  // The torch.distributed backend (process_group.h), returned as torch's own
  // Backend type; torch.distributed wraps it in a ProcessGroup.
  m.def(
      "create_process_group",
      [](std::shared_ptr<Runtime> runtime, int rank, int size, int index)
          -> c10::intrusive_ptr<c10d::Backend> {
        return c10::make_intrusive<hpct::py::EngineBackend>(std::move(runtime), rank, size, index);
      },
      py::arg("runtime"), py::arg("rank"), py::arg("size"), py::arg("index"));

  // DistributedOptimizer's powersgd and int8 modes (lossy_module.h).
  hpct::py::bind_lossy(m);

  // hpctrain.torch.elastic (elastic_module.h).
  hpct::py::bind_elastic(m, error_type);
}
