// The one framed message format of hpctrain's own connections (the job
// store, the data server, the parameter servers), after the handshake of
// auth.h:
//
//   header (28, big-endian)
//     bytes u32 | magic u32 "HPCF" | kind u8 | dtype u8 | flags u16 |
//     piece u32 | count u32 | step u64
//   payload (bytes)
//   MAC (32) = HMAC(session key, dir | seq | header | payload)
//     where dir is 'C' (client to server) or 'S', and seq a per-direction
//     counter from 0 (8 bytes, big-endian) that is never sent: each side
//     counts. A replayed, reordered, reflected or altered frame fails its
//     MAC. The MAC is always there on the store's and the data server's
//     connections; the parameter servers leave it out unless the job asks
//     for it (ps/protocol.h says why).
//
// bytes comes first so that a receiver checks it against its limit as soon
// as those 4 bytes arrive, before it allocates anything or waits for more.
// kind, dtype, flags, piece, count and step belong to the protocol on top:
// the parameter servers use all of them; the store and the data server carry
// their message in the payload and leave them 0.
//
// Link drives one connection from an event loop (non-blocking, payloads sent
// from and received into the caller's memory); FrameChannel is the blocking
// form, with deadlines, for request-reply protocols.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <string>
#include <string_view>

#include "core/clock.h"
#include "core/error.h"
#include "core/fd.h"
#include "net/auth.h"
#include "net/socket.h"

namespace hpct::net {

constexpr size_t kFrameHeaderBytes = 28;
constexpr std::uint32_t kFrameMagic = 0x48504346;  // "HPCF"
constexpr std::uint64_t kMaxFrameBytes = 0xffffffffu;  // what bytes u32 can say

struct FrameHeader {
  std::uint8_t kind = 0;
  std::uint8_t dtype = 0;
  std::uint16_t flags = 0;
  std::uint32_t piece = 0;
  std::uint32_t count = 0;
  std::uint64_t step = 0;
  std::uint64_t bytes = 0;  // payload length; at most kMaxFrameBytes
};

// The header's wire bytes (magic included); InvalidArgument when bytes is
// over kMaxFrameBytes.
void encode_header(const FrameHeader& h, char out[kFrameHeaderBytes]);
// The fields of wire bytes (the magic is the caller's to check: magic_of).
FrameHeader decode_header(const char in[kFrameHeaderBytes]);
std::uint32_t magic_of(const char in[kFrameHeaderBytes]);

// HMAC(key, dir | seq | header bytes | payload).
Mac frame_mac(const Mac& key, Direction dir, std::uint64_t seq,
              const char header[kFrameHeaderBytes], const void* payload, size_t n);

// The bytes of one sealed frame (header, payload, MAC) with the other
// header fields 0. Exposed so tests can replay or alter frames.
std::string seal_frame(const Mac& key, Direction dir, std::uint64_t seq, std::string_view payload);

// What a Link's owner decides for an arriving frame, once its header is in.
struct Landing {
  void* dst = nullptr;  // where the payload goes; nullptr: into the Link's own buffer
};

// One authenticated connection, driven by poll(). Frames go out in the order
// queued; the payload of a queued frame is not copied and must stay valid
// and unchanged until sent() counts it. Not thread-safe: one event loop owns
// it. Does not block: every pump moves what the socket takes now.
class Link {
 public:
  // fd: connected, non-blocking, handshake done (key is its session key).
  // peer names the other end in every message ("parameter server 1 on h2
  // (10.0.0.2:4000)"). max_payload bounds what the peer may send. The
  // first form owns fd, the second borrows it.
  Link(UniqueFd fd, std::string peer, const Mac& key, bool mac_frames, Direction outgoing,
       std::uint64_t max_payload);
  Link(int borrowed_fd, std::string peer, const Mac& key, bool mac_frames, Direction outgoing,
       std::uint64_t max_payload);
  Link(const Link&) = delete;
  Link& operator=(const Link&) = delete;

  int fd() const { return fd_; }
  const std::string& peer() const { return peer_; }
  bool mac_frames() const { return mac_frames_; }
  // From the next frame queued and the next frame received on, frames
  // carry a MAC.
  void enable_mac() { mac_frames_ = true; }
  // The setting that raises max_payload, named when a frame is refused.
  void set_limit_name(std::string name) { limit_name_ = std::move(name); }

  // InvalidArgument when the payload is over kMaxFrameBytes.
  void queue(const FrameHeader& h, const void* payload);
  void queue_owned(const FrameHeader& h, std::string payload);
  bool wants_write() const { return !out_.empty(); }
  std::uint64_t frames_sent() const { return frames_sent_; }
  // The largest payload buffer the Link ever allocated for a frame.
  size_t largest_allocation() const { return largest_allocation_; }
  // Inside done(): moves the payload out when it landed in the Link's own
  // buffer (no copy); false when it landed elsewhere.
  bool take_payload(std::string* out);

  // Sends what the socket takes now. PeerFailure when the peer is gone.
  // Returns whether any byte moved.
  bool pump_send();

  // Reads what has arrived. When a header is complete, land(header) says
  // where its payload goes (it may throw to refuse the frame); when a frame
  // is complete, done(header, payload) is called with the payload's address
  // (its Landing, or the Link's buffer, valid until the next pump); it
  // returns whether to read on (false: leave the next frames in the socket).
  // PeerFailure when the peer closed, DataCorrupt (nothing allocated) for a
  // payload over max_payload, Mismatch for a header without the magic, Auth
  // for a failed MAC. Returns whether any byte moved. Reads at most
  // max_frames frames per call (fairness), and never past the frame it is in.
  template <typename LandFn, typename DoneFn>
  bool pump_recv(LandFn&& land, DoneFn&& done, int max_frames = 16);

 private:
  struct Outgoing {
    char header[kFrameHeaderBytes];
    size_t bytes = 0;
    const char* payload = nullptr;
    std::string owned;
    Mac mac;
    bool with_mac = false;
    size_t sent = 0;  // bytes of header + payload + mac already written
  };
  // Reads into buf up to want bytes; returns bytes read (0: would block).
  size_t read_some(char* buf, size_t want);
  void check_length() const;  // the first 4 header bytes are in
  void check_header() const;  // all of it is in
  void push(const FrameHeader& h, const char* payload, std::string owned);

  UniqueFd owned_fd_;
  int fd_;
  std::string peer_;
  Mac key_;
  bool mac_frames_;
  Direction out_dir_;
  Direction in_dir_;
  std::uint64_t max_payload_;
  std::string limit_name_;
  std::deque<Outgoing> out_;
  std::uint64_t frames_sent_ = 0;
  std::uint64_t send_seq_ = 0;
  std::uint64_t recv_seq_ = 0;
  size_t largest_allocation_ = 0;

  // Receive state: header, then payload, then MAC.
  enum class Stage { kHeader, kPayload, kMac } stage_ = Stage::kHeader;
  char in_raw_[kFrameHeaderBytes];
  FrameHeader in_header_;
  size_t in_got_ = 0;
  char* in_dst_ = nullptr;
  std::string in_buf_;
  Mac in_mac_{};
};

// Blocking helpers on a Link, bounded by until; wake_fd (may be -1) raises
// Woken. recv_frame receives one frame into an owned buffer.
void send_frame(Link& link, const FrameHeader& h, const void* payload,
                SteadyClock::time_point until, int wake_fd = -1);
FrameHeader recv_frame(Link& link, std::string* payload, SteadyClock::time_point until,
                       int wake_fd = -1);

// The blocking end of a request-reply connection, every frame sealed: the
// store's and the data server's. Not thread-safe (one user at a time);
// does not own fd.
class FrameChannel {
 public:
  FrameChannel(int fd, const Mac& key, Direction outgoing, size_t max_frame_bytes, int wake_fd,
               std::string what);

  // InvalidArgument when payload is over max_frame_bytes; else as write_all.
  void send(std::string_view payload, SteadyClock::time_point until);

  // Waits until first_byte_until (kNoDeadline: until woken) for a frame to
  // start; from its first byte the whole frame must arrive within
  // frame_timeout. DataCorrupt, with nothing allocated, when its length is
  // over max_frame_bytes; Auth when the MAC fails; else as read_exact.
  std::string recv(SteadyClock::time_point first_byte_until, Millis frame_timeout);

  // The largest payload buffer recv ever allocated.
  size_t largest_allocation() const { return link_.largest_allocation(); }

 private:
  Link link_;
  size_t max_frame_bytes_;
  int wake_fd_;
};

// ---------------------------------------------------------------- template

template <typename LandFn, typename DoneFn>
bool Link::pump_recv(LandFn&& land, DoneFn&& done, int max_frames) {
  bool moved = false;
  for (int frames = 0; frames < max_frames;) {
    if (stage_ == Stage::kHeader) {
      size_t got = read_some(in_raw_ + in_got_, kFrameHeaderBytes - in_got_);
      if (got == 0) return moved;
      moved = true;
      in_got_ += got;
      if (in_got_ >= 4) check_length();
      if (in_got_ < kFrameHeaderBytes) continue;
      check_header();
      in_header_ = decode_header(in_raw_);
      Landing where = land(static_cast<const FrameHeader&>(in_header_));
      if (where.dst) {
        in_dst_ = static_cast<char*>(where.dst);
      } else {
        in_buf_.resize(in_header_.bytes);
        largest_allocation_ = std::max<size_t>(largest_allocation_, in_header_.bytes);
        in_dst_ = in_buf_.data();
      }
      stage_ = Stage::kPayload;
      in_got_ = 0;
    }
    if (stage_ == Stage::kPayload) {
      if (in_got_ < in_header_.bytes) {
        size_t got = read_some(in_dst_ + in_got_, in_header_.bytes - in_got_);
        if (got == 0) return moved;
        moved = true;
        in_got_ += got;
        if (in_got_ < in_header_.bytes) continue;
      }
      stage_ = mac_frames_ ? Stage::kMac : Stage::kHeader;
      in_got_ = 0;
    }
    if (stage_ == Stage::kMac) {
      size_t got = read_some(reinterpret_cast<char*>(in_mac_.data()) + in_got_,
                             in_mac_.size() - in_got_);
      if (got == 0) return moved;
      moved = true;
      in_got_ += got;
      if (in_got_ < in_mac_.size()) continue;
      if (!macs_equal(in_mac_,
                      frame_mac(key_, in_dir_, recv_seq_, in_raw_, in_dst_, in_header_.bytes))) {
        throw Error(ErrorCode::kAuth, "a message from " + peer_ +
                                          " failed its MAC check (altered, replayed or out of "
                                          "order); closing the connection");
      }
      stage_ = Stage::kHeader;
      in_got_ = 0;
    }
    ++recv_seq_;
    ++frames;
    if (!done(static_cast<const FrameHeader&>(in_header_), static_cast<const char*>(in_dst_))) {
      return true;
    }
  }
  return moved;
}

}  // namespace hpct::net
