#include "data/serve/data_wire.h"

#include <cstring>

#include "core/error.h"
#include "data/bytes.h"

namespace hpct::data::wire {
namespace {

ByteReader reader(std::string_view p, Kind want, const std::string& from) {
  ByteReader r(p, "data server message from " + from);
  if (r.u8() != static_cast<std::uint8_t>(want)) {
    throw_data_corrupt("data server message from " + from + ": unexpected kind");
  }
  return r;
}

}  // namespace

std::string encode(const Open& m) {
  ByteWriter w;
  w.u8(static_cast<std::uint8_t>(Kind::kOpen));
  w.raw(std::string_view(kMagic, sizeof kMagic));
  w.u32(m.rank);
  w.u32(m.size);
  w.u64(m.seed);
  w.i64(m.epoch);
  w.u64(m.start);
  w.u8(m.shuffle);
  w.u64(m.shuffle_buffer);
  w.u64(m.shuffle_initial);
  w.u8(m.drop_last);
  return w.take();
}

Open decode_open(std::string_view p, const std::string& from) {
  ByteReader r = reader(p, Kind::kOpen, from);
  if (r.raw(sizeof kMagic) != std::string_view(kMagic, sizeof kMagic)) {
    throw_mismatch(from + " does not speak the hpctrain data protocol version 1");
  }
  Open m;
  m.rank = r.u32();
  m.size = r.u32();
  m.seed = r.u64();
  m.epoch = r.i64();
  m.start = r.u64();
  m.shuffle = r.u8() != 0;
  m.shuffle_buffer = r.u64();
  m.shuffle_initial = r.u64();
  m.drop_last = r.u8() != 0;
  r.expect_done();
  return m;
}

std::string encode(const Header& m) {
  ByteWriter w;
  w.u8(static_cast<std::uint8_t>(Kind::kHeader));
  w.u64(m.total);
  w.u64(m.padded);
  w.u64(m.dataset_samples);
  w.u64(m.fingerprint);
  w.u64(m.index_skipped);
  return w.take();
}

Header decode_header(std::string_view p, const std::string& from) {
  ByteReader r = reader(p, Kind::kHeader, from);
  Header m;
  m.total = r.u64();
  m.padded = r.u64();
  m.dataset_samples = r.u64();
  m.fingerprint = r.u64();
  m.index_skipped = r.u64();
  r.expect_done();
  return m;
}

std::string encode_error(std::uint32_t code, const std::string& message) {
  ByteWriter w;
  w.u8(static_cast<std::uint8_t>(Kind::kError));
  w.u32(code);
  w.str(message);
  return w.take();
}

void decode_error(std::string_view p, const std::string& from, std::uint32_t* code,
                  std::string* message) {
  ByteReader r = reader(p, Kind::kError, from);
  *code = r.u32();
  *message = r.str();
  r.expect_done();
}

std::string encode(const Chunk& m) {
  ByteWriter w;
  w.u8(static_cast<std::uint8_t>(Kind::kChunk));
  w.u64(m.first);
  w.u32(static_cast<std::uint32_t>(m.samples.size()));
  for (const auto& s : m.samples) {
    w.u64(s.id);
    w.str(s.key);
    w.str(s.shard);
    w.u64(s.member_index);
    w.u64(s.offset);
    w.u8(s.decoded);
    if (s.decoded) {
      w.str(s.error);
      w.u32(static_cast<std::uint32_t>(s.image.height));
      w.u32(static_cast<std::uint32_t>(s.image.width));
      w.u32(static_cast<std::uint32_t>(s.image.channels));
      w.str(std::string_view(reinterpret_cast<const char*>(s.image.pixels.data()), s.image.pixels.size()));
      w.i64(s.label);
    } else {
      w.u32(static_cast<std::uint32_t>(s.fields.size()));
      for (const auto& [ext, bytes] : s.fields) {
        w.str(ext);
        w.str(bytes);
      }
    }
  }
  return w.take();
}

Chunk decode_chunk(std::string_view p, const std::string& from) {
  ByteReader r = reader(p, Kind::kChunk, from);
  Chunk m;
  m.first = r.u64();
  const std::uint32_t n = r.u32();
  if (n > p.size()) throw_data_corrupt("data server message from " + from + ": bad sample count");
  m.samples.resize(n);
  for (auto& s : m.samples) {
    s.id = r.u64();
    s.key = r.str();
    s.shard = r.str();
    s.member_index = r.u64();
    s.offset = r.u64();
    s.decoded = r.u8() != 0;
    if (s.decoded) {
      s.error = r.str();
      s.image.height = static_cast<int>(r.u32());
      s.image.width = static_cast<int>(r.u32());
      s.image.channels = static_cast<int>(r.u32());
      std::string_view px = r.raw(r.u32());
      if (px.size() != static_cast<size_t>(s.image.height) * s.image.width * s.image.channels) {
        throw_data_corrupt("data server message from " + from + ": pixel count does not match the shape");
      }
      s.image.pixels.assign(px.begin(), px.end());
      s.label = r.i64();
    } else {
      const std::uint32_t nf = r.u32();
      if (nf > p.size()) throw_data_corrupt("data server message from " + from + ": bad field count");
      for (std::uint32_t i = 0; i < nf; ++i) {
        std::string ext = r.str();
        s.fields.emplace_back(std::move(ext), r.str());
      }
    }
  }
  r.expect_done();
  return m;
}

std::string encode_end(std::uint64_t total) {
  ByteWriter w;
  w.u8(static_cast<std::uint8_t>(Kind::kEnd));
  w.u64(total);
  return w.take();
}

std::uint64_t decode_end(std::string_view p, const std::string& from) {
  ByteReader r = reader(p, Kind::kEnd, from);
  std::uint64_t total = r.u64();
  r.expect_done();
  return total;
}

Kind kind_of(std::string_view p, const std::string& from) {
  if (p.empty() || p[0] < 1 || p[0] > 5) {
    throw_data_corrupt("data server message from " + from + ": unknown kind");
  }
  return static_cast<Kind>(p[0]);
}

}  // namespace hpct::data::wire
