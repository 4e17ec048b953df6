// What a Handle shares with the engine (engine.h), and the error an
// operation completes with: internal to engine/, used by the submission
// side (engine.cc), the negotiation (negotiation.cc) and the execution
// (execution.cc).
#pragma once

#include <condition_variable>
#include <cstdint>
#include <exception>
#include <mutex>
#include <string>
#include <vector>

#include "core/error.h"
#include "engine/engine.h"

namespace hpct::engine {

struct Handle::State {
  std::string name;
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;                  // GUARDED_BY(mu)
  std::exception_ptr error;           // GUARDED_BY(mu)
  std::vector<std::uint8_t> gathered;  // written before done, read after
  std::vector<std::int64_t> gathered_shape;
  // Valid while !done: the engine completes every handle before it goes.
  Engine* engine = nullptr;
  // Where wait() counts its blocked time (straggler.h); may outlive the engine.
  std::shared_ptr<StragglerMeter> meter;
  // Device tensors: the device, the stream wait() orders, and (set before
  // done) the completion event.
  Device* device = nullptr;
  Stream stream;
  std::shared_ptr<DeviceEvent> completion;
};

// The engine's memory for one device's tensors (execution_device.cc):
// the fusion buffer on the device, pinned host memory to stage a fused
// group through the host communicator, and to stage an allgather's result.
struct Engine::DeviceSlots {
  explicit DeviceSlots(Device& d) : fusion(d, false), staging(d, true), gathered(d, true) {}
  DeviceBuffer fusion;
  DeviceBuffer staging;
  DeviceBuffer gathered;
};

inline std::exception_ptr make_error(ErrorCode code, const std::string& message) {
  return std::make_exception_ptr(Error(code, message));
}

}  // namespace hpct::engine
