// hpctrain.torch.elastic's C++ half: the elastic State (elastic/elastic.h)
// with a payload the Python TorchState turns into bytes, and elastic::run
// around a Python training function, on the Runtime's elastic Worker.
//
// What crosses the Python/C++ border, and how:
// - commit()/check_host_updates() that find a newer generation keep the
//   C++ MembershipChanged here and raise HostsUpdatedInterrupt (Horovod's
//   name) in Python; when it comes back out of the training function, the
//   kept one is rethrown to run().
// - An HpctError with code peer-failure or timeout out of the training
//   function becomes the hpct::Error it was (run() rolls back and re-forms
//   the world); any other Python exception leaves run() as it is.
// - Blocking calls release the GIL; the callbacks into Python take it.
#include "elastic_module.h"

#include <pybind11/functional.h>
#include <pybind11/stl.h>

#include <optional>
#include <string>

#include "core/error.h"
#include "elastic/elastic.h"

namespace py = pybind11;

namespace hpct::py {
namespace {

struct PyState {
  PyState(::py::function save, ::py::function load)
      : state(elastic::State::Payload{
            [save]() {
              ::py::gil_scoped_acquire gil;
              return std::string(::py::bytes(save()));
            },
            [load](const std::string& bytes) {
              ::py::gil_scoped_acquire gil;
              load(::py::bytes(bytes));
            }}) {}
  elastic::State state;
  std::optional<elastic::MembershipChanged> pending;
};

// The hpct::Error a Python HpctError stood for, when run() should retry on
// it; nullopt for anything else.
std::optional<Error> retryable_error(const ::py::error_already_set& e, PyObject* error_type) {
  if (!e.matches(error_type)) return std::nullopt;
  ::py::object code = ::py::getattr(e.value(), "code", ::py::none());
  if (code.is_none()) return std::nullopt;
  const std::string c = ::py::str(code);
  const std::string message = ::py::str(e.value());
  if (c == error_code_name(ErrorCode::kPeerFailure)) return Error(ErrorCode::kPeerFailure, message);
  if (c == error_code_name(ErrorCode::kTimeout)) return Error(ErrorCode::kTimeout, message);
  return std::nullopt;
}

}  // namespace

void bind_elastic(::py::module_& m, PyObject* error_type) {
  static PyObject* hosts_updated =
      ::py::exception<elastic::MembershipChanged>(m, "HostsUpdatedInterrupt", PyExc_RuntimeError)
          .ptr();
  ::py::setattr(::py::handle(hosts_updated), "skip_sync", ::py::bool_(false));

  // Raises HostsUpdatedInterrupt (keeping the change) when f finds a newer generation.
  auto checked = [](PyState& s, void (elastic::State::*f)()) {
    try {
      ::py::gil_scoped_release release;
      (s.state.*f)();
    } catch (const elastic::MembershipChanged& change) {
      s.pending = change;
      PyErr_SetString(hosts_updated, ("the job's membership changed (generation " +
                                      std::to_string(change.generation) +
                                      "); hpctrain.torch.elastic.run goes on in the new world")
                                         .c_str());
      throw ::py::error_already_set();
    }
  };

  ::py::class_<PyState, std::shared_ptr<PyState>>(m, "ElasticState")
      .def(::py::init<::py::function, ::py::function>(), ::py::arg("save"), ::py::arg("load"))
      .def("commit", [checked](PyState& s) { checked(s, &elastic::State::commit); })
      .def("check_host_updates",
           [checked](PyState& s) { checked(s, &elastic::State::check_host_updates); })
      .def("set_on_reset",
           [](PyState& s, ::py::function f) {
             s.state.on_reset([f]() {
               ::py::gil_scoped_acquire gil;
               f();
             });
           })
      .def("save", [](PyState& s) { s.state.save(); })
      .def("restore", [](PyState& s) { s.state.restore(); })
      .def("sync", [](PyState& s) { s.state.sync(); }, ::py::call_guard<::py::gil_scoped_release>())
      .def_property(
          "step", [](const PyState& s) { return s.state.step; },
          [](PyState& s, std::int64_t v) { s.state.step = v; })
      .def_property_readonly("committed_step",
                             [](const PyState& s) { return s.state.committed_step(); })
      .def_property_readonly("commits", [](const PyState& s) { return s.state.commits(); })
      .def_property_readonly("worker_id", [](const PyState& s) { return s.state.worker_id(); })
      .def("last_change", [](const PyState& s) {
        const elastic::Change& c = s.state.last_change();
        ::py::dict d;
        d["generation"] = c.generation;
        d["reason"] = c.reason;
        d["old_size"] = c.old_size;
        d["new_size"] = c.new_size;
        d["rollback_steps"] = c.rollback_steps;
        d["seconds"] = c.seconds;
        return d;
      });

  // Runs train() (no arguments) under elastic::run on the runtime's worker;
  // True when it returned, False when the launcher removed this worker.
  m.def(
      "elastic_run",
      [error_type](std::shared_ptr<PyState> s, std::shared_ptr<Runtime> runtime,
                   ::py::function train) {
        elastic::Worker* worker = runtime->elastic_worker();
        if (worker == nullptr) {
          throw_invalid_argument(
              "hpctrain.torch.elastic.run needs an elastic job: start the script with hpctrain "
              "launch --min-np A --max-np B [--host-discovery-script S] -- python3 ...");
        }
        auto call = [&](Context&) {
          ::py::gil_scoped_acquire gil;
          try {
            train();
          } catch (::py::error_already_set& e) {
            if (e.matches(hosts_updated) && s->pending) {
              elastic::MembershipChanged change = *s->pending;
              s->pending.reset();
              throw change;
            }
            if (auto err = retryable_error(e, error_type)) throw *err;
            throw;
          }
        };
        ::py::gil_scoped_release release;
        return elastic::run(s->state, *worker, call);
      },
      ::py::arg("state"), ::py::arg("runtime"), ::py::arg("train"));
}

}  // namespace hpct::py
