// tf.train.Example's wire format (golden bytes, packed and unpacked lists,
// protobuf's merge rules, malformed input), and the TFRecord reader's error
// policy: a data CRC failure loses one record, framing damage ends the file.
#include "data/formats/tfrecord.h"

#include <gtest/gtest.h>

#include "core/error.h"
#include "data/formats/example.h"
#include "data/decode/fields.h"
#include "data/decode/image.h"
#include "data/test_files.h"

namespace hpct::data {
namespace {

std::string bytes_of(std::initializer_list<int> b) {
  std::string s;
  for (int x : b) s.push_back(static_cast<char>(x));
  return s;
}

TEST(TfExample, WritesTheProtobufWireFormat) {
  // Example{features{feature{key: "a" value{int64_list{value: [1]}}}}},
  // worked out by hand from the protobuf encoding rules (packed, as
  // TensorFlow writes it).
  ExampleWriter w;
  w.add_int64("a", {1});
  EXPECT_EQ(w.finish(), bytes_of({0x0a, 0x0c, 0x0a, 0x0a, 0x0a, 0x01, 'a', 0x12, 0x05, 0x1a, 0x03,
                                  0x0a, 0x01, 0x01}));
  // The same value unpacked: Int64List{ tag(1, varint) 1 }.
  w.add_int64("a", {1}, /*packed=*/false);
  EXPECT_EQ(w.finish(), bytes_of({0x0a, 0x0b, 0x0a, 0x09, 0x0a, 0x01, 'a', 0x12, 0x04, 0x1a, 0x02,
                                  0x08, 0x01}));
  EXPECT_EQ(w.finish(), bytes_of({0x0a, 0x00}))
      << "an empty Example still has its (empty) Features";
}

TEST(TfExample, RoundTripsEveryKindPackedAndUnpacked) {
  const std::string image = std::string("\x89PNG\0\0binary", 12);
  for (bool packed : {true, false}) {
    ExampleWriter w;
    w.add_bytes("image/encoded", {image});
    w.add_bytes("names", {"", "two", std::string(300, 'z')});
    w.add_int64("image/class/label", {7});
    w.add_int64("many", {0, -1, 127, 128, 300, INT64_MAX, INT64_MIN}, packed);
    w.add_float("scores", {0.5f, -2.25f});
    w.add_int64("empty", {});
    const std::string record = w.finish();
    ExampleFeatures f = parse_example(record);
    ASSERT_EQ(f.size(), 6u);
    EXPECT_EQ(f["image/encoded"].kind, ExampleFeature::Kind::kBytes);
    ASSERT_EQ(f["image/encoded"].bytes.size(), 1u);
    EXPECT_EQ(f["image/encoded"].bytes[0], image);
    EXPECT_EQ(f["names"].bytes, (std::vector<std::string_view>{"", "two", std::string(300, 'z')}));
    EXPECT_EQ(f["image/class/label"].int64s, (std::vector<std::int64_t>{7}));
    EXPECT_EQ(f["many"].int64s,
              (std::vector<std::int64_t>{0, -1, 127, 128, 300, INT64_MAX, INT64_MIN}));
    EXPECT_EQ(f["scores"].floats, (std::vector<float>{0.5f, -2.25f}));
    EXPECT_EQ(f["empty"].kind, ExampleFeature::Kind::kInt64);
    EXPECT_TRUE(f["empty"].int64s.empty());
  }
}

TEST(TfExample, FollowsProtobufMergeRules) {
  ExampleWriter a;
  a.add_int64("label", {1});
  a.add_bytes("x", {"first"});
  ExampleWriter b;
  b.add_int64("label", {2});
  // Two Example messages back to back are one merged message; an unknown
  // top-level field (number 9, varint) is skipped; the later "label" wins.
  const std::string record = a.finish() + bytes_of({0x48, 0x96, 0x01}) + b.finish();
  ExampleFeatures f = parse_example(record);
  EXPECT_EQ(f["label"].int64s, (std::vector<std::int64_t>{2}));
  EXPECT_EQ(f["x"].bytes, (std::vector<std::string_view>{"first"}));
  EXPECT_TRUE(parse_example("").empty());
}

TEST(TfExample, MalformedInputIsNamedNeverACrash) {
  ExampleWriter w;
  w.add_bytes("image/encoded", {std::string(200, 'i')});
  w.add_int64("image/class/label", {3, 4, 5});
  w.add_float("f", {1.0f});
  const std::string good = w.finish();
  // Every cut: the outer length then runs past the end.
  for (size_t n = 1; n < good.size(); ++n) {
    try {
      parse_example(std::string_view(good).substr(0, n));
      ADD_FAILURE() << "a record cut to " << n << " bytes parsed";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kDataCorrupt);
      EXPECT_NE(std::string(e.what()).find("malformed tf.train.Example, byte "), std::string::npos)
          << e.what();
    }
  }
  // Every single-byte change either parses or is DataCorrupt (run under the
  // address sanitizer option to see that nothing reads out of bounds).
  for (size_t i = 0; i < good.size(); ++i) {
    for (int flip : {0x01, 0x80, 0xff}) {
      std::string bad = good;
      bad[i] = static_cast<char>(bad[i] ^ flip);
      try {
        parse_example(bad);
      } catch (const Error& e) {
        EXPECT_EQ(e.code(), ErrorCode::kDataCorrupt) << "byte " << i;
      }
    }
  }
  auto message_of = [](const std::string& record) {
    try {
      parse_example(record);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("parsed");
  };
  // A length far past the end, an 11-byte varint, a group, a bad packed float list.
  EXPECT_NE(message_of(bytes_of({0x0a, 0xff, 0xff, 0xff, 0xff, 0x0f, 0x00}))
                .find("byte 1: length 4294967295 runs past"),
            std::string::npos);
  EXPECT_NE(
      message_of(bytes_of({0x08, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x01}))
          .find("varint"),
      std::string::npos);
  EXPECT_NE(message_of(bytes_of({0x0b})).find("groups"), std::string::npos);
  EXPECT_NE(message_of(bytes_of({0x00})).find("field number 0"), std::string::npos);
  // Features{entry{key "f", Feature{float_list{packed 3 bytes}}}}
  EXPECT_NE(message_of(bytes_of({0x0a, 0x0c, 0x0a, 0x0a, 0x0a, 0x01, 'f', 0x12, 0x05, 0x12, 0x03,
                                 0x0a, 0x01, 0x00}))
                .find("not a whole number of floats"),
            std::string::npos);
}

TEST(TfExample, DecodesTheImageAndLabelAndNamesWhatIsWrong) {
  testing::SmallMnist m = testing::load_mnist(1);
  const std::string png = encode_png(m.images[0]);
  auto sample_of = [](std::string record) {
    RawSample s;
    s.shard = "/d/train.tfrecord";
    s.key = "train.tfrecord#4";
    s.member_index = 4;
    s.offset = 1234;
    s.fields.emplace_back(kTfRecordField, std::move(record));
    return s;
  };
  auto error_of = [](const RawSample& s, const FieldOptions& o) {
    try {
      decode_sample(s, o);
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kDataCorrupt);
      return std::string(e.what());
    }
    return std::string("decoded");
  };
  const FieldOptions defaults;
  {
    ExampleWriter w;
    w.add_bytes("image/encoded", {png});
    w.add_int64("image/class/label", {m.labels[0]});
    DecodedSample d = decode_sample(sample_of(w.finish()), defaults);
    EXPECT_EQ(d.label, m.labels[0]);
    EXPECT_EQ(d.image.pixels, m.images[0].pixels);
  }
  const std::string where =
      "TFRecord file /d/train.tfrecord, record 4 (sample train.tfrecord#4), byte offset 1234: ";
  ExampleWriter w;
  w.add_bytes("image", {png});
  w.add_float("label", {1.0f});
  EXPECT_EQ(error_of(sample_of(w.finish()), defaults),
            where + "label feature 'label' holds 1 float values; expected one int64");
  w.add_bytes("image", {png, png});
  w.add_int64("label", {1});
  EXPECT_EQ(
      error_of(sample_of(w.finish()), defaults),
      where + "image feature 'image' holds 2 bytes values; expected one encoded image (bytes)");
  w.add_bytes("image", {"not an image"});
  w.add_int64("label", {1});
  EXPECT_NE(error_of(sample_of(w.finish()), defaults)
                .find(where.substr(0, where.size() - 2) + ", feature image: "),
            std::string::npos);
  w.add_int64("label", {1});
  EXPECT_EQ(error_of(sample_of(w.finish()), defaults),
            where +
                "tf.train.Example has no image feature (image/encoded, image); name it in "
                "example_image_features");
}

// Five records; record i holds i+1 bytes of 'a'+i.
struct FiveRecords {
  std::string bytes;
  std::vector<std::uint64_t> offsets;
  FiveRecords() {
    for (int i = 0; i < 5; ++i) {
      offsets.push_back(bytes.size());
      bytes += encode_tfrecord(std::string(i + 1, static_cast<char>('a' + i)));
    }
  }
};

struct ReadResult {
  std::vector<std::string> records;
  TfRecordReaderStats stats;
  std::string error;     // what fail raised
  std::string warnings;  // what skip logged
};

ReadResult read_all(const std::string& path, OnError on_error) {
  ReadResult out;
  PosixFileSystem fs;
  auto f = fs.open_read(path);
  Logger log(LogLevel::kWarn, "all", 0,
             [&](const std::string& line) { out.warnings += line + "\n"; });
  TfRecordReader reader(*f, on_error, log);
  try {
    while (auto r = reader.next()) out.records.push_back(r->data);
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kDataCorrupt);
    out.error = e.what();
  }
  out.stats = reader.stats();
  return out;
}

TEST(TfRecord, DataCrcFailureLosesOneRecordWithSkip) {
  testing::TempDir dir;
  FiveRecords five;
  std::string bad = five.bytes;
  bad[five.offsets[2] + 12 + 1] ^= 0x04;  // record 2's data
  const std::string path = dir / "data-crc.tfrecord";
  testing::write_file(path, bad);
  const std::string where = path + ", record 2 at byte offset " + std::to_string(five.offsets[2]);

  ReadResult fail = read_all(path, OnError::kFail);
  EXPECT_EQ(fail.records.size(), 2u);
  EXPECT_NE(fail.error.find(where + ": CRC-32C of the data"), std::string::npos) << fail.error;

  ReadResult skip = read_all(path, OnError::kSkip);
  EXPECT_EQ(skip.records, (std::vector<std::string>{"a", "bb", "dddd", "eeeee"}));
  EXPECT_EQ(skip.stats.skipped_records, 1u);
  EXPECT_FALSE(skip.stats.stopped_early);
  EXPECT_NE(skip.warnings.find(where), std::string::npos) << skip.warnings;
}

TEST(TfRecord, FramingDamageEndsTheFileWithSkip) {
  testing::TempDir dir;
  FiveRecords five;
  struct Case {
    std::string name, bytes, expect;
    size_t records_before;
    std::uint64_t at;
  };
  std::string length_crc = five.bytes;
  length_crc[five.offsets[3] + 9] ^= 0x01;  // record 3's length CRC
  std::string length = five.bytes;
  length[five.offsets[1] + 1] ^= 0x01;  // record 1's length (its CRC then fails)
  const std::vector<Case> cases = {
      {"length-crc", length_crc, "CRC-32C of the length field", 3, five.offsets[3]},
      {"length", length, "CRC-32C of the length field", 1, five.offsets[1]},
      {"cut-in-data", five.bytes.substr(0, five.offsets[4] + 14), "cut short", 4, five.offsets[4]},
      {"cut-in-header", five.bytes.substr(0, five.offsets[2] + 5), "inside the record header", 2,
       five.offsets[2]},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name);
    const std::string path = dir / (c.name + ".tfrecord");
    testing::write_file(path, c.bytes);
    const std::string where = path + ", record " + std::to_string(c.records_before) +
                              " at byte offset " + std::to_string(c.at);
    ReadResult fail = read_all(path, OnError::kFail);
    EXPECT_EQ(fail.records.size(), c.records_before);
    EXPECT_NE(fail.error.find(where), std::string::npos) << fail.error;
    EXPECT_NE(fail.error.find(c.expect), std::string::npos) << fail.error;

    ReadResult skip = read_all(path, OnError::kSkip);
    EXPECT_TRUE(skip.error.empty()) << skip.error;
    EXPECT_EQ(skip.records.size(), c.records_before);
    EXPECT_TRUE(skip.stats.stopped_early);
    EXPECT_EQ(skip.stats.skipped_records, 0u);
    ASSERT_EQ(skip.stats.errors.size(), 1u);
    EXPECT_NE(skip.warnings.find(where), std::string::npos) << skip.warnings;
    EXPECT_NE(skip.warnings.find("skipping the rest of a TFRecord file"), std::string::npos)
        << skip.warnings;
  }
}

TEST(TfRecord, RecognisesTensorFlowFileNames) {
  for (const char* yes :
       {"a.tfrecord", "d/a.tfrecords", "x.tfr", "mnist-train.tfrecord-00003-of-00016",
        "/data/imagenet/train.tfrecord-00000-of-01024"}) {
    EXPECT_TRUE(is_tfrecord_path(yes)) << yes;
  }
  for (const char* no : {"a.tar", "a.tfrecord.gz", "a.tfrecord-x", "a.tfrecord-1-of-",
                         "a.tfrecord/x.tar", "tfrecord", "a.tfrecord-00001"}) {
    EXPECT_FALSE(is_tfrecord_path(no)) << no;
  }
}

}  // namespace
}  // namespace hpct::data
