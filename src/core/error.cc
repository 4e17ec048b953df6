#include "core/error.h"

#include <cstring>

namespace hpct {

const char* error_code_name(ErrorCode code) {
  switch (code) {
    case ErrorCode::kTimeout: return "timeout";
    case ErrorCode::kPeerFailure: return "peer-failure";
    case ErrorCode::kInvalidArgument: return "invalid-argument";
    case ErrorCode::kDataCorrupt: return "data-corrupt";
    case ErrorCode::kIo: return "io";
    case ErrorCode::kMismatch: return "mismatch";
    case ErrorCode::kAuth: return "auth";
  }
  return "unknown";
}

int error_exit_code(ErrorCode code) {
  switch (code) {
    case ErrorCode::kInvalidArgument: return 2;
    case ErrorCode::kTimeout: return 124;  // as timeout(1)
    case ErrorCode::kPeerFailure: return 3;
    case ErrorCode::kDataCorrupt: return 4;
    case ErrorCode::kIo: return 5;
    case ErrorCode::kMismatch: return 6;
    case ErrorCode::kAuth: return 7;
  }
  return 1;
}

Error::Error(ErrorCode code, const std::string& message)
    : std::runtime_error(message), code_(code) {}

void throw_timeout(const std::string& m) { throw Error(ErrorCode::kTimeout, m); }
void throw_peer_failure(const std::string& m) { throw Error(ErrorCode::kPeerFailure, m); }
void throw_invalid_argument(const std::string& m) { throw Error(ErrorCode::kInvalidArgument, m); }
void throw_data_corrupt(const std::string& m) { throw Error(ErrorCode::kDataCorrupt, m); }
void throw_mismatch(const std::string& m) { throw Error(ErrorCode::kMismatch, m); }

void throw_io(const std::string& what, int err) {
  throw Error(ErrorCode::kIo, what + ": " + std::strerror(err));
}

}  // namespace hpct
