// `hpctrain plan`'s memory per rank under sharded data parallelism (ZeRO
// stages, docs/plan.md), beside its time predictions.
//
// With Psi parameters, p bytes per parameter and per gradient element and K
// bytes of optimizer state per parameter, on N ranks:
//   stage 0 (no sharding):      (p + p + K) Psi
//   stage 1 (optimizer state):  (p + p) Psi + K Psi / N
//   stage 2 (also gradients):   p Psi + (p + K) Psi / N
//   stage 3 (also parameters):  (p + p + K) Psi / N + p * largest layer
//                               (one layer's parameters gathered at a time)
// Precision and optimizer set p and K:
//   fp32:   p = 4; Adam K = 8 (two moments), SGD with momentum 4, SGD 0
//   mixed:  p = 2 (fp16 parameters and gradients) and an fp32 master copy in
//           the state: Adam K = 12 (the ZeRO paper's), SGD with momentum 8,
//           SGD 4
// The ZeRO paper's example (7.5B parameters, 64 GPUs, Adam, mixed precision,
// no layer term): 120, 31.4, 16.6 and 1.9 GB (memory_model_test.cc).
// Not counted: activations, temporary buffers, the engine's fusion buffer,
// fragmentation.
#pragma once

#include <array>
#include <string>

#include "plan/calibration.h"

namespace hpct::plan {

struct MemoryModel {
  double parameters = 0;           // Psi, elements
  double largest_layer = 0;        // elements of the largest layer's parameters
  double bytes_per_element = 4;    // p: a parameter's (and a gradient's)
  double state_bytes_per_parameter = 8;  // K
  std::string optimizer = "adam";
  std::string precision = "fp32";
};

struct MemoryPerRank {
  double parameters = 0;  // bytes
  double gradients = 0;
  double optimizer_state = 0;
  double total() const { return parameters + gradients + optimizer_state; }
};

// p and K for an optimizer (adam, sgd-momentum, sgd) and precision (fp32,
// mixed); InvalidArgument naming the choices for anything else.
MemoryModel memory_model(double parameters, double largest_layer, const std::string& optimizer,
                         const std::string& precision);

// From a calibration's profile: Psi is its float32 gradient bytes / 4; a
// layer is the parameters whose names share everything before the last
// "." ("2.weight" and "2.bias"; a given profile's ten equal parts are ten
// layers).
MemoryModel memory_model_of(const Profile& profile, const std::string& optimizer,
                            const std::string& precision);

// One rank's bytes at a stage (0..3) on `ranks` ranks; InvalidArgument for
// a stage outside 0..3 or ranks < 1.
MemoryPerRank memory_per_rank(const MemoryModel& m, int stage, int ranks);

}  // namespace hpct::plan
