// hpctrain.torch._C.LossyCompressor: the C++ lossy gradient compressors
// (src/torch/gradient_compressor.h: powersgd[:RANK] and int8, with error
// feedback) for the Python DistributedOptimizer, which hands it every
// gradient of a step at once. The algebra stays in libtorch; Python only
// lists the gradients.
#pragma once

#include <pybind11/pybind11.h>

namespace hpct::py {

// Adds LossyCompressor to m.
void bind_lossy(pybind11::module_& m);

}  // namespace hpct::py
