// The parameter servers' messages: the kinds, element types and flags they
// put in net/frame.h's header, payloads read and written in place (straight
// from and into the tensors' memory) by net::Link, which both the server's
// and the client's event loops drive. server.h writes the protocol down step
// by step; this file holds its vocabulary.
//
// A connection starts with net/auth.h's mutual handshake (both ends prove
// they hold the job secret, fresh nonces, a session key). After it, frames
// in net/frame.h's format, its header fields used as: kind, dtype, flags,
// piece, count, step as each Kind below says. The frame's MAC is there only
// when the job runs with HPCT_PS_FRAME_MAC=1, and never on Hello and its
// answer (Welcome or Error): Hello is where the choice is compared.
// Without mac_frames the data path is checked by TCP's checksum and by the
// header checks (frame magic, kind, piece, dtype, exact byte count) only:
// the peer was authenticated once, at connect. That is the trust model of
// MPI and Gloo (which authenticate nothing); HMAC-SHA256 on every gradient
// byte costs more CPU than the 1 Gbit/s wire it protects on a 2-core host
// (docs/ps.md has the figures). Turn it on across networks you do not trust.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "comm/types.h"
#include "net/frame.h"

namespace hpct::ps {

using comm::DataType;
using comm::dtype_name;
using comm::dtype_size;
using net::FrameHeader;
using net::Landing;
using net::Link;
using net::recv_frame;
using net::send_frame;

constexpr std::uint64_t kProtocolVersion = 2;

enum class Kind : std::uint8_t {
  // worker -> server
  kHello = 1,     // piece = worker rank, count = workers, step = version,
                  // payload = mode u8 | staleness u32 | host
  kRegister = 2,  // piece = id, dtype, step = elements, flags kInit: payload carries values
  kPush = 3,      // piece, dtype, step = worker's step, payload = gradient or update
  kLeave = 4,     // no more pushes this epoch (parks the connection until all have left)
  kFetch = 5,     // piece: send the held parameters (async mode)
  kBye = 6,       // the worker is done with the job
  // server -> worker
  kWelcome = 101,     // piece = server rank, count = mode, step = staleness, payload = host
  kRegistered = 102,  // piece; payload = initial values (async mode) or empty
  kReply = 103,       // piece, count = workers summed (sync) or 0, step; payload
  kLeft = 104,        // every worker has left: the next epoch may start
  kFetched = 105,     // piece; payload = parameters
  kError = 110,       // count = ErrorCode, payload = message
};

// The element types the servers sum: float32, float64, int32, int64 (the
// header's dtype byte is the comm::DataType).
bool is_summable(DataType d);

enum class Mode : std::uint8_t { kSync = 0, kAsync = 1 };
const char* mode_name(Mode m);

constexpr std::uint16_t kFlagInit = 1;  // kRegister: the payload carries initial values
constexpr std::uint16_t kFlagMac = 2;   // kHello: frames carry a MAC

FrameHeader make_header(Kind kind, std::uint32_t piece = 0, std::uint64_t bytes = 0);
// DataCorrupt naming peer unless h.dtype is a DataType the servers sum.
void check_dtype(const FrameHeader& h, const std::string& peer);

// Element-wise dst = sum of srcs in the order given (fixed order: the same
// bits on every worker and every run). n elements of dtype; dst may be srcs[0].
void sum_in_order(DataType dtype, void* dst, const std::vector<const void*>& srcs, size_t n);
// dst += src * scale (float types) or dst += src (integer types: scale ignored).
void add_scaled(DataType dtype, void* dst, const void* src, double scale, size_t n);

}  // namespace hpct::ps
