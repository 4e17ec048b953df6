// TFRecord files of tf.train.Examples through the Loader, on real
// Fashion-MNIST: ranks split them exactly as tar shards, pixels and labels
// equal the tar path's, a saved position resumes, and damage is named with
// fail and counted with skip (a data CRC loses one record; a length CRC or a
// cut ends the file; a malformed Example is a named error, not a crash).
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <map>
#include <set>
#include <thread>

#include "core/error.h"
#include "data/formats/example.h"
#include "data/formats/idx.h"
#include "data/loader.h"
#include "data/formats/pack.h"
#include "data/test_files.h"
#include "data/formats/tfrecord.h"

namespace hpct::data {
namespace {

using testing::TempDir;

constexpr int kPerFile = 2000;

// The Fashion-MNIST test split (10000) packed both ways, 2000 per file.
struct Packed {
  TempDir dir;
  PackResult tar, tfrecord;
};
const Packed& packed() {
  static Packed* p = [] {
    auto* p = new Packed;
    ShardWriterOptions out;
    out.max_count = kPerFile;
    out.pattern = p->dir / "test-%05d.tar";
    p->tar = pack_fashion_mnist(kFashionMnistDir, "test", "png", out);
    out.pattern = p->dir / "test-%05d.tfrecord";
    out.format = ShardFormat::kTfRecord;
    p->tfrecord = pack_fashion_mnist(kFashionMnistDir, "test", "png", out);
    return p;
  }();
  return *p;
}

// "test-00003.tfrecord#17" -> 3 * 2000 + 17; "x.tfr#5" -> 5; "006017" -> 6017.
int dataset_id(const std::string& key) {
  const size_t hash = key.find('#');
  if (hash == std::string::npos) return std::stoi(key);
  const int record = std::stoi(key.substr(hash + 1));
  if (key.rfind("test-", 0) != 0) return record;
  return std::stoi(key.substr(5, 5)) * kPerFile + record;
}

LoaderOptions options(const std::vector<std::string>& shards, int rank, int size) {
  LoaderOptions o;
  o.shards = shards;
  o.rank = rank;
  o.size = size;
  o.seed = 5;
  o.batch_size = 64;
  o.shuffle_buffer = 256;
  o.shuffle_initial = 64;
  o.threads = 2;
  o.prefetch = 3;
  o.timeout = Millis(60000);
  return o;
}

struct Seen {
  std::vector<int> ids;                                         // in delivery order
  std::map<int, std::pair<std::string, std::int64_t>> samples;  // id -> (pixels, label)
};

Seen read_tfrecord_epoch(Loader& l) {
  Seen s;
  Batch b;
  while (l.next(&b)) {
    for (size_t i = 0; i < b.keys.size(); ++i) {
      const int id = dataset_id(b.keys[i]);
      s.ids.push_back(id);
      const auto* px = b.images[static_cast<std::int64_t>(i)].data_ptr<std::uint8_t>();
      s.samples[id] = {std::string(reinterpret_cast<const char*>(px), 784),
                       b.labels[i].item<std::int64_t>()};
    }
  }
  return s;
}

TEST(TfRecordLoader, TwoRanksReadTheDatasetAsTheTarPathDoes) {
  const Packed& p = packed();
  ASSERT_EQ(p.tfrecord.samples, 10000u);
  ASSERT_EQ(p.tfrecord.shards.size(), 5u);
  const std::vector<std::string> tf = {p.dir / "test-{00000..00004}.tfrecord"};
  const std::vector<std::string> tar = {p.dir / "test-{00000..00004}.tar"};
  std::vector<Seen> from_tf(2), from_tar(2);
  std::vector<std::thread> ranks;
  for (int r = 0; r < 2; ++r) {
    ranks.emplace_back([&, r] {
      Loader a(options(tf, r, 2));
      a.start_epoch(1);
      from_tf[r] = read_tfrecord_epoch(a);
      Loader b(options(tar, r, 2));
      b.start_epoch(1);
      from_tar[r] = read_tfrecord_epoch(b);
    });
  }
  for (auto& t : ranks) t.join();

  testing::SmallMnist mnist = testing::load_mnist(10000);
  std::set<int> all;
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(from_tf[r].ids.size(), 5000u);
    // The plan depends on the sample counts, the seed and the epoch, not the
    // format: each rank sees the same samples in the same order.
    EXPECT_EQ(from_tf[r].ids, from_tar[r].ids) << "rank " << r;
    EXPECT_EQ(from_tf[r].samples, from_tar[r].samples) << "rank " << r;
    for (const auto& [id, s] : from_tf[r].samples) {
      EXPECT_TRUE(all.insert(id).second) << "sample " << id << " on both ranks";
      ASSERT_EQ(s.second, mnist.labels[id]) << id;
      ASSERT_TRUE(
          std::equal(s.first.begin(), s.first.end(), mnist.images[id].pixels.begin(),
                     [](char a, std::uint8_t b) { return static_cast<std::uint8_t>(a) == b; }))
          << id;
    }
  }
  EXPECT_EQ(all.size(), 10000u) << "the union is the dataset";
}

TEST(TfRecordLoader, ResumedRunSeesTheSameRest) {
  const Packed& p = packed();
  auto o = options({p.dir / "test-{00000..00004}.tfrecord"}, 1, 3);
  o.batch_size = 256;
  Loader full(o);
  full.start_epoch(2);
  std::vector<std::vector<std::string>> all;
  Batch b;
  while (full.next(&b)) all.push_back(b.keys);
  for (size_t k : {size_t{0}, size_t{3}}) {
    Loader first(o);
    first.start_epoch(2);
    for (size_t i = 0; i < k; ++i) ASSERT_TRUE(first.next(&b));
    Loader resumed(o);
    resumed.restore_state(first.save_state());
    std::vector<std::vector<std::string>> rest;
    while (resumed.next(&b)) rest.push_back(b.keys);
    EXPECT_EQ(rest, std::vector<std::vector<std::string>>(
                        all.begin() + static_cast<std::ptrdiff_t>(k), all.end()));
  }
}

// 40 Examples of Fashion-MNIST images; record i is test image i.
std::vector<std::string> small_examples() {
  testing::SmallMnist m = testing::load_mnist(40);
  std::vector<std::string> out;
  for (size_t i = 0; i < m.images.size(); ++i) {
    out.push_back(encode_image_example(encode_png(m.images[i]), "png", m.labels[i], 28, 28));
  }
  return out;
}

std::string tfrecord_file(const std::vector<std::string>& records,
                          std::vector<std::uint64_t>* offsets) {
  std::string file;
  for (const auto& r : records) {
    offsets->push_back(file.size());
    file += encode_tfrecord(r);
  }
  return file;
}

struct Outcome {
  std::string error;           // with fail
  std::set<std::string> keys;  // with skip
  LoaderStats stats;
  std::uint64_t samples_per_epoch = 0;
};

// The damaged file after a good one, read with fail and with skip.
Outcome read_both_ways(const std::string& good, const std::string& damaged) {
  Outcome out;
  auto o = options({good, damaged}, 0, 1);
  o.batch_size = 16;
  try {
    Loader l(o);
    read_tfrecord_epoch(l);
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kDataCorrupt) << e.what();
    out.error = e.what();
  }
  o.on_error = OnError::kSkip;
  Loader l(o);
  Batch b;
  while (l.next(&b)) out.keys.insert(b.keys.begin(), b.keys.end());
  out.stats = l.stats();
  out.samples_per_epoch = l.samples_per_epoch();
  return out;
}

std::set<std::string> keys_of(const std::string& name, size_t from, size_t to) {
  std::set<std::string> k;
  for (size_t i = from; i < to; ++i) k.insert(name + "#" + std::to_string(i));
  return k;
}

TEST(TfRecordLoader, DamageIsNamedWithFailAndCountedWithSkip) {
  TempDir dir;
  const std::vector<std::string> examples = small_examples();
  std::vector<std::uint64_t> off;
  const std::string file = tfrecord_file(examples, &off);
  const std::string good = dir / "good.tfrecord";
  testing::write_file(good, file);
  const std::set<std::string> good_keys = keys_of("good.tfrecord", 0, 40);
  auto expect_named = [](const Outcome& o, const std::string& path, size_t record,
                         std::uint64_t offset, const std::string& what) {
    EXPECT_NE(o.error.find("TFRecord file " + path + ", record " + std::to_string(record)),
              std::string::npos)
        << o.error;
    EXPECT_NE(o.error.find("byte offset " + std::to_string(offset)), std::string::npos) << o.error;
    EXPECT_NE(o.error.find(what), std::string::npos) << o.error;
  };
  auto with = [&](std::set<std::string> a, const std::set<std::string>& b) {
    a.insert(b.begin(), b.end());
    return a;
  };

  {  // A flipped bit in record 5's data: that record alone is lost.
    SCOPED_TRACE("data CRC");
    std::string bad = file;
    bad[off[5] + 12 + 40] ^= 0x08;
    const std::string path = dir / "data-crc.tfrecord";
    testing::write_file(path, bad);
    Outcome o = read_both_ways(good, path);
    expect_named(o, path, 5, off[5], "CRC-32C of the data does not match");
    std::set<std::string> want = with(good_keys, keys_of("data-crc.tfrecord", 0, 40));
    want.erase("data-crc.tfrecord#5");
    EXPECT_EQ(o.keys, want);
    EXPECT_EQ(o.stats.skipped, 1u);
    EXPECT_EQ(o.stats.index_skipped, 0u);
    ASSERT_FALSE(o.stats.errors.empty());
    EXPECT_NE(o.stats.errors[0].find(path), std::string::npos);
  }
  {  // Record 20's length CRC: records 20.. cannot be framed.
    SCOPED_TRACE("length CRC");
    std::string bad = file;
    bad[off[20] + 8] ^= 0x01;
    const std::string path = dir / "length-crc.tfrecord";
    testing::write_file(path, bad);
    Outcome o = read_both_ways(good, path);
    expect_named(o, path, 20, off[20], "CRC-32C of the length field does not match");
    EXPECT_EQ(o.keys, with(good_keys, keys_of("length-crc.tfrecord", 0, 20)));
    EXPECT_EQ(o.samples_per_epoch, 60u);
    EXPECT_EQ(o.stats.index_skipped, 1u) << "the record whose frame failed";
    EXPECT_EQ(o.stats.skipped, 0u);
  }
  {  // Cut inside record 30's data.
    SCOPED_TRACE("truncated");
    const std::string path = dir / "truncated.tfrecord";
    testing::write_file(path, file.substr(0, off[30] + 12 + 100));
    Outcome o = read_both_ways(good, path);
    expect_named(o, path, 30, off[30], "cut short by the end of the file");
    EXPECT_EQ(o.keys, with(good_keys, keys_of("truncated.tfrecord", 0, 30)));
    EXPECT_EQ(o.stats.index_skipped, 1u);
  }
  {  // Record 7's Example claims more bytes than it has (the record's CRCs
     // are good: it was written that way).
    SCOPED_TRACE("malformed Example");
    std::vector<std::string> records = examples;
    records[7] = records[7].substr(0, records[7].size() - 30);
    std::vector<std::uint64_t> o2;
    const std::string path = dir / "malformed.tfrecord";
    testing::write_file(path, tfrecord_file(records, &o2));
    Outcome o = read_both_ways(good, path);
    expect_named(o, path, 7, o2[7], "malformed tf.train.Example, byte 1: length");
    std::set<std::string> want = with(good_keys, keys_of("malformed.tfrecord", 0, 40));
    want.erase("malformed.tfrecord#7");
    EXPECT_EQ(o.keys, want);
    EXPECT_EQ(o.stats.skipped, 1u);
  }
  {  // Record 9's Example has no label.
    SCOPED_TRACE("Example without a label");
    std::vector<std::string> records = examples;
    ExampleWriter w;
    w.add_bytes("image/encoded", {encode_png(testing::load_mnist(1).images[0])});
    records[9] = w.finish();
    std::vector<std::uint64_t> o2;
    const std::string path = dir / "nolabel.tfrecord";
    testing::write_file(path, tfrecord_file(records, &o2));
    Outcome o = read_both_ways(good, path);
    expect_named(o, path, 9, o2[9], "no label feature (image/class/label, label)");
    std::set<std::string> want = with(good_keys, keys_of("nolabel.tfrecord", 0, 40));
    want.erase("nolabel.tfrecord#9");
    EXPECT_EQ(o.keys, want);
    EXPECT_EQ(o.stats.skipped, 1u);
  }
}

TEST(TfRecordLoader, FeatureNamesAreConfigurableAndFormatsMix) {
  TempDir dir;
  testing::SmallMnist m = testing::load_mnist(8);
  std::string tfds, custom;
  for (size_t i = 0; i < 8; ++i) {
    const std::string png = encode_png(m.images[i]);
    ExampleWriter a;  // TensorFlow Datasets' names, label unpacked
    a.add_int64("label", {m.labels[i]}, /*packed=*/false);
    a.add_bytes("image", {png});
    tfds += encode_tfrecord(a.finish());
    ExampleWriter b;
    b.add_bytes("pixels/png", {png});
    b.add_int64("target", {m.labels[i]});
    custom += encode_tfrecord(b.finish());
  }
  testing::write_file(dir / "tfds.tfrecord-00000-of-00001", tfds);
  testing::write_file(dir / "custom.tfr", custom);
  auto tar = testing::write_mnist_shards(dir.path(), 8, 8);
  ASSERT_EQ(tar.size(), 1u);

  auto o = options({dir / "tfds.tfrecord-00000-of-00001", tar[0]}, 0, 1);
  o.shuffle = false;
  Loader mixed(o);
  Seen s = read_tfrecord_epoch(mixed);
  EXPECT_EQ(s.ids.size(), 16u) << "8 records and 8 tar samples";

  o.shards = {dir / "custom.tfr"};
  try {
    Loader l(o);
    read_tfrecord_epoch(l);
    ADD_FAILURE() << "custom feature names found without being named";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("no image feature (image/encoded, image); name it in "
                                         "example_image_features"),
              std::string::npos)
        << e.what();
  }
  o.example_image_features = {"pixels/png"};
  o.example_label_features = {"target"};
  Loader named(o);
  Batch b;
  ASSERT_TRUE(named.next(&b));
  ASSERT_EQ(b.keys.size(), 8u);
  for (size_t i = 0; i < 8; ++i) {
    EXPECT_EQ(b.keys[i], "custom.tfr#" + std::to_string(i));
    EXPECT_EQ(b.labels[static_cast<std::int64_t>(i)].item<std::int64_t>(), m.labels[i]);
  }
}

}  // namespace
}  // namespace hpct::data
