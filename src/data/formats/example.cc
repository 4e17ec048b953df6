#include "data/formats/example.h"

#include <cstring>

#include "core/error.h"

namespace hpct::data {
namespace {

// Protobuf wire types.
constexpr int kVarint = 0;
constexpr int kFixed64 = 1;
constexpr int kLengthDelimited = 2;
constexpr int kStartGroup = 3;
constexpr int kEndGroup = 4;
constexpr int kFixed32 = 5;

constexpr size_t kMaxVarintBytes = 10;  // 64 bits at 7 per byte

// Reads one message's fields from a slice of the record. base is where the
// slice starts in the record, so errors give record offsets.
class WireReader {
 public:
  WireReader(std::string_view bytes, size_t base) : bytes_(bytes), base_(base) {}

  bool done() const { return pos_ >= bytes_.size(); }
  size_t offset() const { return base_ + pos_; }

  std::uint64_t varint() {
    const size_t start = pos_;
    std::uint64_t v = 0;
    for (size_t i = 0; i < kMaxVarintBytes; ++i) {
      if (pos_ >= bytes_.size()) fail(start, "varint runs past the end");
      const auto byte = static_cast<unsigned char>(bytes_[pos_++]);
      if (i == kMaxVarintBytes - 1 && byte > 1) fail(start, "varint overflows 64 bits");
      v |= static_cast<std::uint64_t>(byte & 0x7f) << (7 * i);
      if ((byte & 0x80) == 0) return v;
    }
    fail(start, "varint longer than 10 bytes");
  }

  // A tag: sets the field number and wire type.
  void tag(std::uint64_t* field, int* wire_type) {
    const size_t start = pos_;
    const std::uint64_t t = varint();
    *field = t >> 3;
    *wire_type = static_cast<int>(t & 7);
    if (*field == 0) fail(start, "field number 0");
  }

  // The payload of a length-delimited field; *payload_offset is where it
  // starts in the record.
  std::string_view length_delimited(size_t* payload_offset) {
    const size_t start = pos_;
    const std::uint64_t len = varint();
    const size_t left = bytes_.size() - pos_;
    if (len > left) {
      fail(start, "length " + std::to_string(len) + " runs past the end of its message (" +
                      std::to_string(left) + " bytes left)");
    }
    *payload_offset = base_ + pos_;
    std::string_view out = bytes_.substr(pos_, static_cast<size_t>(len));
    pos_ += static_cast<size_t>(len);
    return out;
  }

  std::string_view fixed(size_t n) {
    if (bytes_.size() - pos_ < n) fail(pos_, "fixed-size field runs past the end");
    std::string_view out = bytes_.substr(pos_, n);
    pos_ += n;
    return out;
  }

  void skip(int wire_type) {
    size_t ignored;
    switch (wire_type) {
      case kVarint:
        varint();
        return;
      case kFixed64:
        fixed(8);
        return;
      case kLengthDelimited:
        length_delimited(&ignored);
        return;
      case kFixed32:
        fixed(4);
        return;
      case kStartGroup:
      case kEndGroup:
        fail(pos_, "protobuf groups are not used by tf.train.Example");
      default:
        fail(pos_, "invalid wire type " + std::to_string(wire_type));
    }
  }

  [[noreturn]] void fail(size_t at, const std::string& what) const {
    throw_data_corrupt("malformed tf.train.Example, byte " + std::to_string(base_ + at) + ": " +
                       what);
  }

 private:
  std::string_view bytes_;
  size_t base_;
  size_t pos_ = 0;
};

float float_from_le(std::string_view four) {
  std::uint32_t bits = 0;
  for (int i = 3; i >= 0; --i) bits = (bits << 8) | static_cast<unsigned char>(four[i]);
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

// Reads each field of the message `body` (at byte `base` of the record):
// `take(r, field, wire_type)` consumes the fields it knows and returns true;
// every other field is skipped, as protobuf requires.
template <typename Take>
void for_each_field(std::string_view body, size_t base, Take&& take) {
  WireReader r(body, base);
  while (!r.done()) {
    std::uint64_t field;
    int wt;
    r.tag(&field, &wt);
    if (!take(r, field, wt)) r.skip(wt);
  }
}

void parse_bytes_list(std::string_view body, size_t base, ExampleFeature* f) {
  for_each_field(body, base, [&](WireReader& r, std::uint64_t field, int wt) {
    if (field != 1 || wt != kLengthDelimited) return false;
    size_t at;
    f->bytes.push_back(r.length_delimited(&at));
    return true;
  });
}

void parse_int64_list(std::string_view body, size_t base, ExampleFeature* f) {
  for_each_field(body, base, [&](WireReader& r, std::uint64_t field, int wt) {
    if (field == 1 && wt == kVarint) {
      f->int64s.push_back(static_cast<std::int64_t>(r.varint()));
      return true;
    }
    if (field != 1 || wt != kLengthDelimited) return false;
    size_t at;  // packed
    std::string_view packed = r.length_delimited(&at);
    WireReader p(packed, at);
    while (!p.done()) f->int64s.push_back(static_cast<std::int64_t>(p.varint()));
    return true;
  });
}

void parse_float_list(std::string_view body, size_t base, ExampleFeature* f) {
  for_each_field(body, base, [&](WireReader& r, std::uint64_t field, int wt) {
    if (field == 1 && wt == kFixed32) {
      f->floats.push_back(float_from_le(r.fixed(4)));
      return true;
    }
    if (field != 1 || wt != kLengthDelimited) return false;
    const size_t tag_end = r.offset();  // packed
    size_t at;
    std::string_view packed = r.length_delimited(&at);
    if (packed.size() % 4 != 0) {
      r.fail(tag_end - base, "packed float list of " + std::to_string(packed.size()) +
                                 " bytes is not a whole number of floats");
    }
    for (size_t i = 0; i < packed.size(); i += 4)
      f->floats.push_back(float_from_le(packed.substr(i, 4)));
    return true;
  });
}

void parse_feature(std::string_view body, size_t base, ExampleFeature* f) {
  for_each_field(body, base, [&](WireReader& r, std::uint64_t field, int wt) {
    if (field < 1 || field > 3 || wt != kLengthDelimited) return false;
    const auto kind = field == 1   ? ExampleFeature::Kind::kBytes
                      : field == 2 ? ExampleFeature::Kind::kFloat
                                   : ExampleFeature::Kind::kInt64;
    if (f->kind != kind) *f = ExampleFeature{kind, {}, {}, {}};  // another oneof member: replace
    size_t at;
    std::string_view list = r.length_delimited(&at);
    if (kind == ExampleFeature::Kind::kBytes) parse_bytes_list(list, at, f);
    if (kind == ExampleFeature::Kind::kFloat) parse_float_list(list, at, f);
    if (kind == ExampleFeature::Kind::kInt64) parse_int64_list(list, at, f);
    return true;
  });
}

void parse_map_entry(std::string_view body, size_t base, ExampleFeatures* out) {
  std::string name;
  ExampleFeature feature;
  for_each_field(body, base, [&](WireReader& r, std::uint64_t field, int wt) {
    if ((field != 1 && field != 2) || wt != kLengthDelimited) return false;
    size_t at;
    std::string_view value = r.length_delimited(&at);
    if (field == 1) {
      name = std::string(value);
    } else {
      parse_feature(value, at, &feature);
    }
    return true;
  });
  (*out)[name] = std::move(feature);  // a key seen again: the last entry wins
}

// A message whose field 1 (length-delimited, repeated) holds messages that
// `parse` reads: Example.features and Features.feature (the map's entries).
template <typename Parse>
void parse_repeated_message(std::string_view body, size_t base, Parse&& parse) {
  for_each_field(body, base, [&](WireReader& r, std::uint64_t field, int wt) {
    if (field != 1 || wt != kLengthDelimited) return false;
    size_t at;
    std::string_view inner = r.length_delimited(&at);
    parse(inner, at);
    return true;
  });
}

void put_varint(std::string* out, std::uint64_t v) {
  while (v >= 0x80) {
    out->push_back(static_cast<char>((v & 0x7f) | 0x80));
    v >>= 7;
  }
  out->push_back(static_cast<char>(v));
}

void put_tag(std::string* out, int field, int wire_type) {
  put_varint(out, static_cast<std::uint64_t>(field) << 3 | static_cast<std::uint64_t>(wire_type));
}

void put_length_delimited(std::string* out, int field, std::string_view payload) {
  put_tag(out, field, kLengthDelimited);
  put_varint(out, payload.size());
  out->append(payload);
}

}  // namespace

ExampleFeatures parse_example(std::string_view record) {
  ExampleFeatures out;
  parse_repeated_message(record, 0, [&](std::string_view features, size_t at) {
    parse_repeated_message(features, at, [&](std::string_view entry, size_t entry_at) {
      parse_map_entry(entry, entry_at, &out);
    });
  });
  return out;
}

const char* feature_kind_name(ExampleFeature::Kind kind) {
  switch (kind) {
    case ExampleFeature::Kind::kBytes:
      return "bytes";
    case ExampleFeature::Kind::kFloat:
      return "float";
    case ExampleFeature::Kind::kInt64:
      return "int64";
    case ExampleFeature::Kind::kNone:
      break;
  }
  return "empty";
}

void ExampleWriter::add_bytes(std::string_view name, const std::vector<std::string_view>& values) {
  std::string list;
  for (auto v : values) put_length_delimited(&list, 1, v);
  std::string feature;
  put_length_delimited(&feature, 1, list);
  add_feature(name, feature);
}

void ExampleWriter::add_int64(std::string_view name, const std::vector<std::int64_t>& values,
                              bool packed) {
  std::string list;
  if (packed) {
    std::string varints;
    for (auto v : values) put_varint(&varints, static_cast<std::uint64_t>(v));
    put_length_delimited(&list, 1, varints);
  } else {
    for (auto v : values) {
      put_tag(&list, 1, kVarint);
      put_varint(&list, static_cast<std::uint64_t>(v));
    }
  }
  std::string feature;
  put_length_delimited(&feature, 3, list);
  add_feature(name, feature);
}

void ExampleWriter::add_float(std::string_view name, const std::vector<float>& values) {
  std::string le;
  for (float v : values) {
    std::uint32_t bits;
    std::memcpy(&bits, &v, sizeof bits);
    for (int i = 0; i < 4; ++i) le.push_back(static_cast<char>((bits >> (8 * i)) & 0xff));
  }
  std::string list;
  put_length_delimited(&list, 1, le);
  std::string feature;
  put_length_delimited(&feature, 2, list);
  add_feature(name, feature);
}

void ExampleWriter::add_feature(std::string_view name, const std::string& feature) {
  std::string entry;
  put_length_delimited(&entry, 1, name);
  put_length_delimited(&entry, 2, feature);
  put_length_delimited(&features_, 1, entry);
}

std::string ExampleWriter::finish() {
  std::string example;
  put_length_delimited(&example, 1, features_);
  features_.clear();
  return example;
}

}  // namespace hpct::data
