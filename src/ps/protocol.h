// The parameter servers' wire: fixed 32-byte frame headers, payloads read
// and written in place (straight from and into the tensors' memory), and one
// non-blocking connection type (Link) that both the server's and the
// client's event loops drive. server.h writes the protocol down step by
// step; this file holds its bytes.
//
// A connection starts with the store's mutual handshake (store/auth.h: both
// ends prove they hold the job secret, fresh nonces, a session key). After
// it, frames:
//   header (32, little-endian: every host runs the same build)
//     magic u32 'HPPS' | kind u8 | dtype u8 | flags u16 | piece u32 |
//     count u32 | step u64 | bytes u64
//   payload (bytes)
//   MAC (32) = HMAC(session key, dir | seq | header | payload), only when the
//     job runs with HPCT_PS_FRAME_MAC=1, and never on Hello and its answer
//     (Welcome or Error): Hello is where the choice is compared
// Without mac_frames the data path is checked by TCP's checksum and by the
// header checks (magic, kind, piece, dtype, exact byte count) only: the peer
// was authenticated once, at connect. That is the trust model of MPI and
// Gloo (which authenticate nothing); HMAC-SHA256 on every gradient byte
// costs more CPU than the 1 Gbit/s wire it protects on a 2-core host
// (docs/ps.md has the figures). Turn it on across networks you do not trust.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "core/clock.h"
#include "core/error.h"
#include "core/fd.h"
#include "store/auth.h"

namespace hpct::ps {

constexpr std::uint32_t kMagic = 0x53505048;  // "HPPS" in little-endian bytes
constexpr std::uint64_t kProtocolVersion = 1;

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

enum class Dtype : std::uint8_t { kFloat32 = 0, kFloat64 = 1, kInt32 = 2, kInt64 = 3 };
size_t dtype_size(Dtype d);
const char* dtype_name(Dtype d);

enum class Mode : std::uint8_t { kSync = 0, kAsync = 1 };
const char* mode_name(Mode m);

constexpr std::uint16_t kFlagInit = 1;  // kRegister: the payload carries initial values
constexpr std::uint16_t kFlagMac = 2;   // kHello: frames carry a MAC

#pragma pack(push, 1)
struct FrameHeader {
  std::uint32_t magic = kMagic;
  std::uint8_t kind = 0;
  std::uint8_t dtype = 0;
  std::uint16_t flags = 0;
  std::uint32_t piece = 0;
  std::uint32_t count = 0;
  std::uint64_t step = 0;
  std::uint64_t bytes = 0;
};
#pragma pack(pop)
static_assert(sizeof(FrameHeader) == 32, "the frame header is 32 bytes on the wire");

FrameHeader make_header(Kind kind, std::uint32_t piece = 0, std::uint64_t bytes = 0);

// Element-wise dst = sum of srcs in the order given (fixed order: the same
// bits on every worker and every run). n elements of dtype; dst may be srcs[0].
void sum_in_order(Dtype dtype, void* dst, const std::vector<const void*>& srcs, size_t n);
// dst += src * scale (float types) or dst += src (integer types: scale ignored).
void add_scaled(Dtype dtype, void* dst, const void* src, double scale, size_t n);

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
  // (10.0.0.2:4000)"). max_payload bounds what the peer may send.
  Link(UniqueFd fd, std::string peer, const store::auth::Mac& key, bool mac_frames,
       store::auth::Direction outgoing, std::uint64_t max_payload);
  Link(const Link&) = delete;
  Link& operator=(const Link&) = delete;

  int fd() const { return fd_.get(); }
  const std::string& peer() const { return peer_; }
  bool mac_frames() const { return mac_frames_; }
  // From the next frame queued and the next frame received on, frames
  // carry a MAC (after Hello and Welcome).
  void enable_mac() { mac_frames_ = true; }

  void queue(const FrameHeader& h, const void* payload);
  void queue_owned(const FrameHeader& h, std::string payload);
  bool wants_write() const { return !out_.empty(); }
  std::uint64_t frames_sent() const { return frames_sent_; }

  // Sends what the socket takes now. PeerFailure when the peer is gone.
  // Returns whether any byte moved.
  bool pump_send();

  // Reads what has arrived. When a header is complete, land(header) says
  // where its payload goes (it may throw to refuse the frame); when a frame
  // is complete, done(header, payload) is called with the payload's address
  // (its Landing, or the Link's buffer, valid until the next pump); it
  // returns whether to read on (false: leave the next frames in the socket).
  // PeerFailure when the peer closed, DataCorrupt for a bad header or a
  // payload over max_payload, Auth for a failed MAC. Returns whether any
  // byte moved. Reads at most max_frames frames per call (fairness).
  template <typename LandFn, typename DoneFn>
  bool pump_recv(LandFn&& land, DoneFn&& done, int max_frames = 16);

 private:
  struct Outgoing {
    FrameHeader header;
    const char* payload;
    std::string owned;
    store::auth::Mac mac;
    bool with_mac = false;
    size_t sent = 0;  // bytes of header + payload + mac already written
  };
  // Reads into buf up to want bytes; returns bytes read (0: would block).
  size_t read_some(char* buf, size_t want);
  void check_header(const FrameHeader& h) const;
  store::auth::Mac frame_mac(store::auth::Direction dir, std::uint64_t seq, const FrameHeader& h,
                             const char* payload) const;

  UniqueFd fd_;
  std::string peer_;
  store::auth::Mac key_;
  bool mac_frames_;
  store::auth::Direction out_dir_;
  store::auth::Direction in_dir_;
  std::uint64_t max_payload_;
  std::deque<Outgoing> out_;
  std::uint64_t frames_sent_ = 0;
  std::uint64_t send_seq_ = 0;
  std::uint64_t recv_seq_ = 0;

  // Receive state: header, then payload, then MAC.
  enum class Stage { kHeader, kPayload, kMac } stage_ = Stage::kHeader;
  FrameHeader in_header_;
  size_t in_got_ = 0;
  char* in_dst_ = nullptr;
  std::string in_buf_;
  store::auth::Mac in_mac_{};
};

// Blocking helpers for the few control frames outside the event loops
// (hello and welcome): bounded by until.
void send_frame(Link& link, const FrameHeader& h, const void* payload,
                SteadyClock::time_point until);
// Receives one frame into an owned buffer (payload at most max bytes).
FrameHeader recv_frame(Link& link, std::string* payload, SteadyClock::time_point until);

// ---------------------------------------------------------------- template

template <typename LandFn, typename DoneFn>
bool Link::pump_recv(LandFn&& land, DoneFn&& done, int max_frames) {
  bool moved = false;
  for (int frames = 0; frames < max_frames;) {
    if (stage_ == Stage::kHeader) {
      size_t got = read_some(reinterpret_cast<char*>(&in_header_) + in_got_,
                             sizeof(FrameHeader) - in_got_);
      if (got == 0) return moved;
      moved = true;
      in_got_ += got;
      if (in_got_ < sizeof(FrameHeader)) continue;
      check_header(in_header_);
      Landing where = land(static_cast<const FrameHeader&>(in_header_));
      if (where.dst) {
        in_dst_ = static_cast<char*>(where.dst);
      } else {
        in_buf_.resize(in_header_.bytes);
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
      if (!store::auth::macs_equal(in_mac_, frame_mac(in_dir_, recv_seq_, in_header_, in_dst_))) {
        throw Error(ErrorCode::kAuth, "a frame from " + peer_ +
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

}  // namespace hpct::ps
