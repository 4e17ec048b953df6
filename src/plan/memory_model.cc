#include "plan/memory_model.h"

#include <algorithm>
#include <map>

#include "core/error.h"

namespace hpct::plan {

MemoryModel memory_model(double parameters, double largest_layer, const std::string& optimizer,
                         const std::string& precision) {
  MemoryModel m;
  m.parameters = parameters;
  m.largest_layer = largest_layer;
  m.optimizer = optimizer;
  m.precision = precision;
  double state = 0;  // fp32 bytes per parameter of the optimizer's own state
  if (optimizer == "adam") {
    state = 8;
  } else if (optimizer == "sgd-momentum") {
    state = 4;
  } else if (optimizer == "sgd") {
    state = 0;
  } else {
    throw_invalid_argument("plan: optimizer '" + optimizer +
                           "' is not one of adam, sgd-momentum, sgd (--optimizer)");
  }
  if (precision == "fp32") {
    m.bytes_per_element = 4;
    m.state_bytes_per_parameter = state;
  } else if (precision == "mixed") {
    m.bytes_per_element = 2;                   // fp16 parameters and gradients
    m.state_bytes_per_parameter = state + 4;   // and the fp32 master parameters
  } else {
    throw_invalid_argument("plan: precision '" + precision +
                           "' is not one of fp32, mixed (--precision)");
  }
  if (!(parameters >= 0) || !(largest_layer >= 0) || largest_layer > parameters) {
    throw_invalid_argument("plan: " + std::to_string(parameters) + " parameters with a largest layer of " +
                           std::to_string(largest_layer) + ": give counts >= 0, the layer within the model");
  }
  return m;
}

MemoryModel memory_model_of(const Profile& profile, const std::string& optimizer,
                            const std::string& precision) {
  std::map<std::string, double> layers;  // name before the last '.' -> bytes
  for (const auto& g : profile.gradients) {
    const auto dot = g.name.rfind('.');
    layers[dot == std::string::npos ? g.name : g.name.substr(0, dot)] += g.bytes;
  }
  double largest = 0;
  for (const auto& [name, bytes] : layers) largest = std::max(largest, bytes);
  return memory_model(profile.gradient_bytes() / 4, largest / 4, optimizer, precision);
}

MemoryPerRank memory_per_rank(const MemoryModel& m, int stage, int ranks) {
  if (stage < 0 || stage > 3)
    throw_invalid_argument("plan: shard stage " + std::to_string(stage) + " is not one of 0, 1, 2, 3");
  if (ranks < 1) throw_invalid_argument("plan: memory per rank needs at least 1 rank");
  const double n = ranks;
  const double weights = m.bytes_per_element * m.parameters;
  const double state = m.state_bytes_per_parameter * m.parameters;
  MemoryPerRank r;
  r.parameters = weights;
  r.gradients = weights;
  r.optimizer_state = stage >= 1 ? state / n : state;
  if (stage >= 2) r.gradients = weights / n;
  if (stage >= 3) {
    // Each rank's shard plus the one layer gathered for its forward or
    // backward (never more than the whole model).
    r.parameters = std::min(weights, weights / n + m.bytes_per_element * m.largest_layer);
  }
  return r;
}

}  // namespace hpct::plan
