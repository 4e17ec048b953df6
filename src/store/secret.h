// The per-job secret that authenticates every TCP store connection.
//
// The launcher generates one secret per job and hands it to each rank through
// an inherited file descriptor (HPCT_SECRET_FD), never argv or the
// environment, where `ps` and /proc/<pid>/environ would show it.
#pragma once

#include <string>

#include "core/clock.h"

namespace hpct::store {

// 32 random bytes from OpenSSL's RAND_bytes, as 64 lowercase hex digits. Io
// when the random generator fails. Thread-safe.
std::string generate_secret();

// Reads the secret from fd: bytes up to the first newline or end of file,
// at most 4096 of them, waiting at most timeout for them. A trailing "\n" or
// "\r\n" is dropped. InvalidArgument naming the fd when the secret is empty
// or too long, Timeout when the writer neither writes a line nor closes, Io
// when the read fails. Does not close fd (the caller owns it).
std::string read_secret_from_fd(int fd, Millis timeout = Millis(10000));

// The job's secret for a rank process: read from fd (read_secret_from_fd)
// the first time, the same value on every later call with that fd. A rank
// that leaves the job and joins it again (hvd.shutdown(), hvd.init()) meets
// a launcher that wrote the secret once. Thread-safe.
std::string job_secret(int fd);

}  // namespace hpct::store
