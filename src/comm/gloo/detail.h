// Helpers the Gloo backend's files share (communicator.cc and the allreduce
// paths ring.cc, direct.cc, hierarchical.cc): Gloo's error text to our error
// codes, op descriptions for messages, and GlooCommunicator::run, the one
// rule by which every op turns a Gloo or direct-link failure into fail().
// Private to src/comm/gloo/.
#pragma once

#include <gloo/common/error.h>
#include <gloo/common/logging.h>
#include <gloo/transport/unbound_buffer.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "comm/direct_mesh.h"
#include "comm/gloo/communicator.h"
#include "core/error.h"

namespace hpct::comm {
namespace gloo_detail {

// Slot prefix of our ring reduce-scatter; Gloo's own collectives use
// 0x01..0x08 (gloo/types.h), our send/recv 0x40.
constexpr std::uint8_t kReduceScatterSlotPrefix = 0x41;

std::string strip_gloo_location(const std::string& m);
ErrorCode classify_gloo_message(const std::string& message);
std::string rank_list(const std::vector<int>& ranks);
std::string describe_op(const char* op, size_t count, DataType dtype);

// Gloo's typed setters want a T whose size is the element size; our reduce
// function knows the real dtype, so an unsigned integer of that size will do.
template <typename Fn>
void with_element_type(DataType t, Fn&& fn) {
  switch (dtype_size(t)) {
    case 1:
      fn(std::uint8_t{});
      break;
    case 2:
      fn(std::uint16_t{});
      break;
    case 4:
      fn(std::uint32_t{});
      break;
    case 8:
      fn(std::uint64_t{});
      break;
    default:
      throw_invalid_argument(std::string("gloo: unsupported dtype ") + dtype_name(t));
  }
}

// Waits for one unbound-buffer transfer until the deadline; Gloo's
// IoException (through run()) when it is aborted or times out.
inline void wait_recv(gloo::transport::UnboundBuffer& b, const Deadline& d) {
  if (!b.waitRecv(std::max(d.remaining(), Millis(1)))) {
    throw gloo::IoException("recv aborted");
  }
}

inline void wait_send(gloo::transport::UnboundBuffer& b, const Deadline& d) {
  if (!b.waitSend(std::max(d.remaining(), Millis(1)))) {
    throw gloo::IoException("send aborted");
  }
}

}  // namespace gloo_detail

template <typename Fn>
void GlooCommunicator::run(const std::string& what, Millis timeout, int peer, Fn&& fn) {
  latch_.throw_if_failed();
  try {
    fn();
  } catch (const DirectLinkError& e) {
    fail(what, timeout, e.peer(), e.code(), e.what());
  } catch (const gloo::EnforceNotMet& e) {
    // Gloo asserts when ranks disagree on sizes (a peer sent more bytes than
    // this rank expects).
    fail(what, timeout, peer, ErrorCode::kMismatch, gloo_detail::strip_gloo_location(e.what()));
  } catch (const gloo::Exception& e) {
    const std::string detail = gloo_detail::strip_gloo_location(e.what());
    fail(what, timeout, peer, gloo_detail::classify_gloo_message(detail), detail);
  }
}

}  // namespace hpct::comm
