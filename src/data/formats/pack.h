// Turning datasets into WebDataset tar shards (or TFRecord files of
// tf.train.Example records, out.format): Fashion-MNIST's idx files (Debian's
// dataset-fashion-mnist) and ImageNet-style folders of class sub-folders.
// Used by `hpctrain data pack`.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>

#include "data/formats/shard_writer.h"

namespace hpct::data {

// Called after each sample with (samples done, samples in all).
using PackProgress = std::function<void(std::uint64_t done, std::uint64_t total)>;

struct PackResult {
  std::uint64_t samples = 0;
  std::uint64_t bytes = 0;
  std::vector<std::string> shards;
  std::vector<std::string> classes;  // folder packing: label i is classes[i]
};

// A tf.train.Example as TensorFlow's image datasets write one:
// image/encoded, image/format ("png", "jpeg"), image/class/label, and
// image/height and image/width when they are given (> 0).
std::string encode_image_example(std::string_view encoded, std::string_view format, std::int64_t label,
                                 int height = 0, int width = 0);

// Sample i of the split becomes key "%06d" (i) with fields `image_format`
// ("png": lossless, bit-exact; or "jpg") and "cls" (the label as decimal
// text), in the idx files' order; in TFRecord format, record i is
// encode_image_example of the same image and label. Io / DataCorrupt from
// the idx reader.
PackResult pack_fashion_mnist(const std::string& dir, const std::string& split,
                              const std::string& image_format, ShardWriterOptions out,
                              const PackProgress& progress = nullptr);

// DIR/<class>/<file>.{jpg,jpeg,png}: classes are the sub-folders in sorted
// order (label = position); image bytes are stored as they are (not
// re-encoded), key "<class>/<file stem, dots made underscores>". Files are
// shuffled with shuffle_seed (so a shard holds many classes), unless
// shuffle_seed is negative. InvalidArgument when DIR has no class folders.
PackResult pack_folder(const std::string& dir, std::int64_t shuffle_seed, ShardWriterOptions out,
                       const PackProgress& progress = nullptr);

}  // namespace hpct::data
