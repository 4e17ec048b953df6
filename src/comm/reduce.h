// Element-wise reduction kernels shared by the backends.
//
// Gloo takes a reduction function, MPI a user-defined op for the types it has
// no built-in for (float16, bfloat16); both call these, so every backend
// reduces every (dtype, op) the same way. float16 and bfloat16 are reduced in
// float32 and rounded once per step.
#pragma once

#include <cstddef>

#include "comm/types.h"

namespace hpct::comm {

// out[i] = a[i] op b[i]. out may alias a or b. kAvg reduces as kSum; the
// caller divides once at the end (finish_average).
void reduce_elements(void* out, const void* a, const void* b, size_t count, DataType dtype,
                     ReduceOp op);

// data[i] /= divisor, for kAvg after a sum. Floating dtypes only.
void finish_average(void* data, size_t count, DataType dtype, int divisor);

// out[i] = (a[i] + b[i]) / divisor: kAvg's last reduction step and the
// division in one pass, with the same bits as reduce_elements(kSum) followed
// by finish_average. out may alias a or b.
void sum_and_average(void* out, const void* a, const void* b, size_t count, DataType dtype,
                     int divisor);

// InvalidArgument when op cannot apply to dtype (avg of an integer type).
void check_reducible(DataType dtype, ReduceOp op);

}  // namespace hpct::comm
