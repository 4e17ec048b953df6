#include "ps/protocol.h"

#include <poll.h>
#include <sys/socket.h>
#include <sys/uio.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace hpct::ps {

namespace auth = store::auth;

size_t dtype_size(Dtype d) {
  switch (d) {
    case Dtype::kFloat32:
    case Dtype::kInt32:
      return 4;
    case Dtype::kFloat64:
    case Dtype::kInt64:
      return 8;
  }
  return 0;
}

const char* dtype_name(Dtype d) {
  switch (d) {
    case Dtype::kFloat32:
      return "float32";
    case Dtype::kFloat64:
      return "float64";
    case Dtype::kInt32:
      return "int32";
    case Dtype::kInt64:
      return "int64";
  }
  return "unknown";
}

const char* mode_name(Mode m) { return m == Mode::kSync ? "sync" : "async"; }

FrameHeader make_header(Kind kind, std::uint32_t piece, std::uint64_t bytes) {
  FrameHeader h;
  h.kind = static_cast<std::uint8_t>(kind);
  h.piece = piece;
  h.bytes = bytes;
  return h;
}

namespace {

template <typename T>
void sum_typed(T* dst, const std::vector<const void*>& srcs, size_t n) {
  // Blocks of 4096 elements keep the partial sums in cache while every
  // source is added in its fixed place in the order.
  constexpr size_t kBlock = 4096;
  const T* first = static_cast<const T*>(srcs[0]);
  for (size_t b = 0; b < n; b += kBlock) {
    const size_t e = std::min(n, b + kBlock);
    if (dst != first) std::memcpy(dst + b, first + b, (e - b) * sizeof(T));
    for (size_t s = 1; s < srcs.size(); ++s) {
      const T* src = static_cast<const T*>(srcs[s]);
      for (size_t i = b; i < e; ++i) dst[i] += src[i];
    }
  }
}

template <typename T>
void add_scaled_typed(T* dst, const T* src, T scale, size_t n) {
  for (size_t i = 0; i < n; ++i) dst[i] += src[i] * scale;
}

}  // namespace

void sum_in_order(Dtype dtype, void* dst, const std::vector<const void*>& srcs, size_t n) {
  if (srcs.empty()) {
    std::memset(dst, 0, n * dtype_size(dtype));
    return;
  }
  switch (dtype) {
    case Dtype::kFloat32:
      return sum_typed(static_cast<float*>(dst), srcs, n);
    case Dtype::kFloat64:
      return sum_typed(static_cast<double*>(dst), srcs, n);
    case Dtype::kInt32:
      return sum_typed(static_cast<std::int32_t*>(dst), srcs, n);
    case Dtype::kInt64:
      return sum_typed(static_cast<std::int64_t*>(dst), srcs, n);
  }
}

void add_scaled(Dtype dtype, void* dst, const void* src, double scale, size_t n) {
  switch (dtype) {
    case Dtype::kFloat32:
      return add_scaled_typed(static_cast<float*>(dst), static_cast<const float*>(src),
                              static_cast<float>(scale), n);
    case Dtype::kFloat64:
      return add_scaled_typed(static_cast<double*>(dst), static_cast<const double*>(src), scale,
                              n);
    case Dtype::kInt32:
      return add_scaled_typed(static_cast<std::int32_t*>(dst),
                              static_cast<const std::int32_t*>(src), std::int32_t{1}, n);
    case Dtype::kInt64:
      return add_scaled_typed(static_cast<std::int64_t*>(dst),
                              static_cast<const std::int64_t*>(src), std::int64_t{1}, n);
  }
}

Link::Link(UniqueFd fd, std::string peer, const auth::Mac& key, bool mac_frames,
           auth::Direction outgoing, std::uint64_t max_payload)
    : fd_(std::move(fd)),
      peer_(std::move(peer)),
      key_(key),
      mac_frames_(mac_frames),
      out_dir_(outgoing),
      in_dir_(outgoing == auth::Direction::kClientToServer ? auth::Direction::kServerToClient
                                                           : auth::Direction::kClientToServer),
      max_payload_(max_payload) {}

auth::Mac Link::frame_mac(auth::Direction dir, std::uint64_t seq, const FrameHeader& h,
                          const char* payload) const {
  char seq_bytes[8];
  for (int i = 7; i >= 0; --i) seq_bytes[7 - i] = static_cast<char>(seq >> (8 * i));
  const char dir_byte = static_cast<char>(dir);
  return auth::hmac_sha256(
      auth::as_view(key_),
      {std::string_view(&dir_byte, 1), std::string_view(seq_bytes, 8),
       std::string_view(reinterpret_cast<const char*>(&h), sizeof h),
       std::string_view(payload ? payload : "", payload ? h.bytes : 0)});
}

void Link::queue(const FrameHeader& h, const void* payload) {
  Outgoing o;
  o.header = h;
  o.payload = static_cast<const char*>(payload);
  // The MAC is computed when queued: the payload must not change until sent.
  o.with_mac = mac_frames_;
  if (mac_frames_) o.mac = frame_mac(out_dir_, send_seq_, h, o.payload);
  ++send_seq_;
  out_.push_back(std::move(o));
}

void Link::queue_owned(const FrameHeader& h, std::string payload) {
  FrameHeader hh = h;
  hh.bytes = payload.size();
  Outgoing o;
  o.header = hh;
  o.owned = std::move(payload);
  out_.push_back(std::move(o));
  Outgoing& back = out_.back();
  back.payload = back.owned.data();
  back.with_mac = mac_frames_;
  if (mac_frames_) back.mac = frame_mac(out_dir_, send_seq_, hh, back.payload);
  ++send_seq_;
}

bool Link::pump_send() {
  bool moved = false;
  while (!out_.empty()) {
    Outgoing& o = out_.front();
    const size_t hb = sizeof(FrameHeader);
    const size_t pb = o.header.bytes;
    const size_t mb = o.with_mac ? o.mac.size() : 0;
    iovec iov[3];
    int n = 0;
    size_t at = o.sent;
    if (at < hb) iov[n++] = {reinterpret_cast<char*>(&o.header) + at, hb - at};
    if (at < hb + pb) {
      const size_t off = at > hb ? at - hb : 0;
      iov[n++] = {const_cast<char*>(o.payload) + off, pb - off};
    }
    if (mb > 0) {
      const size_t off = at > hb + pb ? at - hb - pb : 0;
      iov[n++] = {o.mac.data() + off, mb - off};
    }
    msghdr msg{};
    msg.msg_iov = iov;
    msg.msg_iovlen = static_cast<size_t>(n);
    ssize_t put = ::sendmsg(fd_.get(), &msg, MSG_DONTWAIT | MSG_NOSIGNAL);
    if (put < 0) {
      if (errno == EAGAIN || errno == EWOULDBLOCK) return moved;
      if (errno == EINTR) continue;
      if (errno == ECONNRESET || errno == EPIPE) throw_peer_failure(peer_ + " closed the connection");
      throw_io("send to " + peer_, errno);
    }
    moved = true;
    o.sent += static_cast<size_t>(put);
    if (o.sent == hb + pb + mb) {
      out_.pop_front();
      ++frames_sent_;
    }
  }
  return moved;
}

size_t Link::read_some(char* buf, size_t want) {
  while (true) {
    ssize_t got = ::recv(fd_.get(), buf, want, MSG_DONTWAIT);
    if (got > 0) return static_cast<size_t>(got);
    if (got == 0) throw_peer_failure(peer_ + " closed the connection");
    if (errno == EAGAIN || errno == EWOULDBLOCK) return 0;
    if (errno == EINTR) continue;
    if (errno == ECONNRESET || errno == EPIPE) throw_peer_failure(peer_ + " reset the connection");
    throw_io("recv from " + peer_, errno);
  }
}

void Link::check_header(const FrameHeader& h) const {
  if (h.magic != kMagic) {
    throw_data_corrupt(peer_ + " sent a frame without the parameter-server magic (not an "
                               "hpctrain parameter-server peer, or the stream lost its place)");
  }
  if (h.bytes > max_payload_) {
    throw_data_corrupt(peer_ + " sent a frame of " + std::to_string(h.bytes) +
                       " bytes; the limit is " + std::to_string(max_payload_));
  }
  if (h.dtype > static_cast<std::uint8_t>(Dtype::kInt64)) {
    throw_data_corrupt(peer_ + " sent a frame with unknown dtype " + std::to_string(h.dtype));
  }
}

void send_frame(Link& link, const FrameHeader& h, const void* payload,
                SteadyClock::time_point until) {
  link.queue(h, payload);
  while (link.wants_write()) {
    if (link.pump_send()) continue;
    auth::wait_writable(link.fd(), until, -1, link.peer());
  }
}

FrameHeader recv_frame(Link& link, std::string* payload, SteadyClock::time_point until) {
  bool have = false;
  FrameHeader got;
  while (!have) {
    link.pump_recv([](const FrameHeader&) { return Landing{}; },
                   [&](const FrameHeader& h, const char* p) {
                     got = h;
                     payload->assign(p, h.bytes);
                     have = true;
                     return false;
                   },
                   1);
    if (!have) auth::wait_readable(link.fd(), until, -1, link.peer());
  }
  return got;
}

}  // namespace hpct::ps
