// From a sample's fields to an image and a label: which field is which, and
// how labels are written (.cls and .txt hold a decimal integer, .json an
// integer or an object with a "label" member), as WebDataset datasets do.
// A TFRecord sample's record is a tf.train.Example (example.h): the image is
// a bytes feature holding an encoded PNG/JPEG and the label an int64 feature,
// found by name as the tar fields are.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "data/sample.h"

namespace hpct::data {

struct FieldOptions {
  std::vector<std::string> image_fields = {"png", "jpg", "jpeg"};
  std::vector<std::string> label_fields = {"cls", "txt", "json"};
  // TFRecord samples: the first feature present wins. The defaults are the
  // names TensorFlow's image datasets use (TF-Slim/Object Detection style,
  // then TensorFlow Datasets style).
  std::vector<std::string> example_image_features = {"image/encoded", "image"};
  std::vector<std::string> example_label_features = {"image/class/label", "label"};
  int channels = 0;  // see decode_image
};

struct DecodedSample {
  Image image;
  std::int64_t label = -1;
};

// DataCorrupt naming the sample (sample.where()) when the image or label
// field is missing, the image does not decode or the label does not parse
// (TFRecord: the Example is malformed, or its image or label feature is
// missing, of another type or does not hold exactly one value).
// A sample a data server decoded is passed through (or its error raised).
// Thread-safe.
DecodedSample decode_sample(const RawSample& sample, const FieldOptions& options);
// The same, decoding into *image (reusing its buffer); returns the label.
std::int64_t decode_sample_into(const RawSample& sample, const FieldOptions& options, Image* image);

// The label in a .cls/.txt/.json field; DataCorrupt (without location,
// callers add it) when it is not an integer.
std::int64_t parse_label(std::string_view bytes, const std::string& ext);

}  // namespace hpct::data
