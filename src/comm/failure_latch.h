// Remembers the first failure of a communicator so that every later
// operation fails the same way at once: after a timeout or a dead peer, the
// backends' connections are in an unknown state and must not be reused.
#pragma once

#include <mutex>
#include <optional>
#include <string>

#include "core/error.h"

namespace hpct::comm {

class FailureLatch {
 public:
  // Throws the remembered error, if any. Thread-safe.
  void throw_if_failed() const {
    std::lock_guard<std::mutex> lock(mu_);
    if (error_) throw Error(error_->code(), std::string(error_->what()));
  }
  // Remembers e (the first one wins) and throws it.
  [[noreturn]] void fail(const Error& e) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (!error_) error_.emplace(e.code(), "communicator is broken by an earlier failure: " +
                                                std::string(e.what()));
    }
    throw e;
  }
  bool failed() const {
    std::lock_guard<std::mutex> lock(mu_);
    return error_.has_value();
  }

 private:
  mutable std::mutex mu_;
  std::optional<Error> error_;  // guarded by mu_
};

}  // namespace hpct::comm
