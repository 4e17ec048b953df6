// Errors that hpctrain raises to its users.
//
// Every failure a user can cause or meet (a dead peer, a timeout, bad input,
// corrupt data) is an hpct::Error with a code and a message that names what
// failed: the rank, host, tensor, key, file and byte offset. A programmer
// error inside hpctrain is an assertion, not an Error.
#pragma once

#include <stdexcept>
#include <string>

namespace hpct {

enum class ErrorCode {
  kTimeout,          // a bounded wait ran out
  kPeerFailure,      // another rank or host died or closed its connection
  kInvalidArgument,  // the caller passed something unusable
  kDataCorrupt,      // bytes on disk or on the wire failed a check
  kIo,               // the OS refused a file or socket operation
  kMismatch,         // ranks disagree (shape, dtype, op, version)
  kAuth,             // a peer failed authentication
};

// "timeout", "peer-failure", ... as printed by the CLI.
const char* error_code_name(ErrorCode code);

// The process exit code the CLI uses for an error of this code. 1 is kept for
// "the check failed" (doctor) and 2 for bad command-line arguments.
int error_exit_code(ErrorCode code);

class Error : public std::runtime_error {
 public:
  Error(ErrorCode code, const std::string& message);
  ErrorCode code() const { return code_; }

 private:
  ErrorCode code_;
};

// Shorthands so call sites read as what happened.
[[noreturn]] void throw_timeout(const std::string& message);
[[noreturn]] void throw_peer_failure(const std::string& message);
[[noreturn]] void throw_invalid_argument(const std::string& message);
[[noreturn]] void throw_data_corrupt(const std::string& message);
[[noreturn]] void throw_mismatch(const std::string& message);
// Io with strerror(err) appended: "open /x/y: No such file or directory".
[[noreturn]] void throw_io(const std::string& what, int err);

}  // namespace hpct
