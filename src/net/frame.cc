#include "net/frame.h"

#include <sys/socket.h>
#include <sys/uio.h>

#include <algorithm>
#include <cerrno>

namespace hpct::net {
namespace {

void put_be(char* out, std::uint64_t v, int bytes) {
  for (int i = bytes - 1; i >= 0; --i) {
    out[i] = static_cast<char>(v & 0xff);
    v >>= 8;
  }
}

std::uint64_t get_be(const char* in, int bytes) {
  std::uint64_t v = 0;
  for (int i = 0; i < bytes; ++i) v = (v << 8) | static_cast<unsigned char>(in[i]);
  return v;
}

}  // namespace

void encode_header(const FrameHeader& h, char out[kFrameHeaderBytes]) {
  if (h.bytes > kMaxFrameBytes) {
    throw_invalid_argument("a frame of " + std::to_string(h.bytes) +
                           " bytes is over the format's limit of " +
                           std::to_string(kMaxFrameBytes));
  }
  put_be(out, h.bytes, 4);
  put_be(out + 4, kFrameMagic, 4);
  out[8] = static_cast<char>(h.kind);
  out[9] = static_cast<char>(h.dtype);
  put_be(out + 10, h.flags, 2);
  put_be(out + 12, h.piece, 4);
  put_be(out + 16, h.count, 4);
  put_be(out + 20, h.step, 8);
}

FrameHeader decode_header(const char in[kFrameHeaderBytes]) {
  FrameHeader h;
  h.bytes = get_be(in, 4);
  h.kind = static_cast<std::uint8_t>(in[8]);
  h.dtype = static_cast<std::uint8_t>(in[9]);
  h.flags = static_cast<std::uint16_t>(get_be(in + 10, 2));
  h.piece = static_cast<std::uint32_t>(get_be(in + 12, 4));
  h.count = static_cast<std::uint32_t>(get_be(in + 16, 4));
  h.step = get_be(in + 20, 8);
  return h;
}

std::uint32_t magic_of(const char in[kFrameHeaderBytes]) {
  return static_cast<std::uint32_t>(get_be(in + 4, 4));
}

Mac frame_mac(const Mac& key, Direction dir, std::uint64_t seq,
              const char header[kFrameHeaderBytes], const void* payload, size_t n) {
  char seq_bytes[8];
  put_be(seq_bytes, seq, 8);
  const char dir_byte = static_cast<char>(dir);
  return hmac_sha256(as_view(key),
                     {std::string_view(&dir_byte, 1), std::string_view(seq_bytes, 8),
                      std::string_view(header, kFrameHeaderBytes),
                      std::string_view(payload ? static_cast<const char*>(payload) : "",
                                       payload ? n : 0)});
}

std::string seal_frame(const Mac& key, Direction dir, std::uint64_t seq, std::string_view payload) {
  FrameHeader h;
  h.bytes = payload.size();
  char header[kFrameHeaderBytes];
  encode_header(h, header);
  const Mac mac = frame_mac(key, dir, seq, header, payload.data(), payload.size());
  std::string frame;
  frame.reserve(kFrameHeaderBytes + payload.size() + kMacBytes);
  frame.append(header, kFrameHeaderBytes);
  frame.append(payload);
  frame.append(as_view(mac));
  return frame;
}

// ---------------------------------------------------------------- Link

Link::Link(UniqueFd fd, std::string peer, const Mac& key, bool mac_frames, Direction outgoing,
           std::uint64_t max_payload)
    : Link(fd.get(), std::move(peer), key, mac_frames, outgoing, max_payload) {
  owned_fd_ = std::move(fd);
}

Link::Link(int borrowed_fd, std::string peer, const Mac& key, bool mac_frames,
           Direction outgoing, std::uint64_t max_payload)
    : fd_(borrowed_fd),
      peer_(std::move(peer)),
      key_(key),
      mac_frames_(mac_frames),
      out_dir_(outgoing),
      in_dir_(opposite(outgoing)),
      max_payload_(std::min(max_payload, kMaxFrameBytes)) {}

void Link::push(const FrameHeader& h, const char* payload, std::string owned) {
  out_.emplace_back();
  Outgoing& o = out_.back();
  try {
    encode_header(h, o.header);
  } catch (...) {
    out_.pop_back();
    throw;
  }
  o.bytes = h.bytes;
  o.owned = std::move(owned);
  o.payload = payload ? payload : o.owned.data();
  // The MAC is computed when queued: the payload must not change until sent.
  o.with_mac = mac_frames_;
  if (mac_frames_) o.mac = frame_mac(key_, out_dir_, send_seq_, o.header, o.payload, o.bytes);
  ++send_seq_;
}

void Link::queue(const FrameHeader& h, const void* payload) {
  push(h, static_cast<const char*>(payload), {});
}

void Link::queue_owned(const FrameHeader& h, std::string payload) {
  FrameHeader hh = h;
  hh.bytes = payload.size();
  push(hh, nullptr, std::move(payload));
}

bool Link::pump_send() {
  bool moved = false;
  while (!out_.empty()) {
    Outgoing& o = out_.front();
    const size_t hb = kFrameHeaderBytes;
    const size_t pb = o.bytes;
    const size_t mb = o.with_mac ? o.mac.size() : 0;
    iovec iov[3];
    int n = 0;
    size_t at = o.sent;
    if (at < hb) iov[n++] = {o.header + at, hb - at};
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
    ssize_t put = ::sendmsg(fd_, &msg, MSG_DONTWAIT | MSG_NOSIGNAL);
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
    ssize_t got = ::recv(fd_, buf, want, MSG_DONTWAIT);
    if (got > 0) return static_cast<size_t>(got);
    if (got == 0) throw_peer_failure(peer_ + " closed the connection");
    if (errno == EAGAIN || errno == EWOULDBLOCK) return 0;
    if (errno == EINTR) continue;
    if (errno == ECONNRESET || errno == EPIPE) throw_peer_failure(peer_ + " reset the connection");
    throw_io("recv from " + peer_, errno);
  }
}

bool Link::take_payload(std::string* out) {
  if (in_dst_ != in_buf_.data()) return false;
  out->swap(in_buf_);
  in_buf_.clear();
  in_dst_ = nullptr;
  return true;
}

void Link::check_length() const {
  const std::uint64_t len = get_be(in_raw_, 4);
  if (len > max_payload_) {
    // Refused on the length alone: nothing is allocated for it.
    throw_data_corrupt(peer_ + " sent a frame of " + std::to_string(len) +
                       " bytes; the limit is " + std::to_string(max_payload_) +
                       (limit_name_.empty() ? "" : " (" + limit_name_ + ")"));
  }
}

void Link::check_header() const {
  if (magic_of(in_raw_) != kFrameMagic) {
    throw_mismatch(peer_ + " sent a frame without the hpctrain frame magic (not an hpctrain "
                           "peer, or the stream lost its place)");
  }
}

void send_frame(Link& link, const FrameHeader& h, const void* payload,
                SteadyClock::time_point until, int wake_fd) {
  link.queue(h, payload);
  while (link.wants_write()) {
    if (link.pump_send()) continue;
    wait_writable(link.fd(), until, wake_fd, link.peer());
  }
}

FrameHeader recv_frame(Link& link, std::string* payload, SteadyClock::time_point until,
                       int wake_fd) {
  bool have = false;
  FrameHeader got;
  while (!have) {
    link.pump_recv([](const FrameHeader&) { return Landing{}; },
                   [&](const FrameHeader& h, const char* p) {
                     got = h;
                     if (!link.take_payload(payload)) payload->assign(p, h.bytes);
                     have = true;
                     return false;
                   },
                   1);
    if (!have) wait_readable(link.fd(), until, wake_fd, link.peer());
  }
  return got;
}

// ---------------------------------------------------------------- FrameChannel

FrameChannel::FrameChannel(int fd, const Mac& key, Direction outgoing, size_t max_frame_bytes,
                           int wake_fd, std::string what)
    : link_(fd, std::move(what), key, /*mac_frames=*/true, outgoing, max_frame_bytes),
      max_frame_bytes_(max_frame_bytes),
      wake_fd_(wake_fd) {
  link_.set_limit_name("HPCT_MAX_FRAME_BYTES");
}

void FrameChannel::send(std::string_view payload, SteadyClock::time_point until) {
  if (payload.size() > max_frame_bytes_ || payload.size() > kMaxFrameBytes) {
    throw_invalid_argument("a message of " + std::to_string(payload.size()) + " bytes for " +
                           link_.peer() + " exceeds the limit of " +
                           std::to_string(max_frame_bytes_) + " bytes (HPCT_MAX_FRAME_BYTES)");
  }
  FrameHeader h;
  h.bytes = payload.size();
  send_frame(link_, h, payload.data(), until, wake_fd_);
}

std::string FrameChannel::recv(SteadyClock::time_point first_byte_until, Millis frame_timeout) {
  wait_readable(link_.fd(), first_byte_until, wake_fd_, link_.peer());
  std::string payload;
  recv_frame(link_, &payload, SteadyClock::now() + frame_timeout, wake_fd_);
  return payload;
}

}  // namespace hpct::net
