// hpctrain.torch.elastic's C++ half (elastic_module.cc): ElasticState,
// HostsUpdatedInterrupt and elastic_run in the _C module.
#pragma once

#include <Python.h>
#include <pybind11/pybind11.h>

#include "runtime.h"

namespace hpct::py {

// Adds the elastic names to m; error_type is the module's HpctError.
void bind_elastic(pybind11::module_& m, PyObject* error_type);

}  // namespace hpct::py
