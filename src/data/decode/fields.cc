#include "data/decode/fields.h"

#include <nlohmann/json.hpp>

#include <cstdlib>

#include "core/error.h"
#include "data/formats/example.h"
#include "data/decode/image.h"

namespace hpct::data {
namespace {

std::string join(const std::vector<std::string>& v, const char* prefix = ".") {
  std::string s;
  for (const auto& x : v) s += (s.empty() ? "" : ", ") + (prefix + x);
  return s;
}

// The first of names present in the Example, or null.
const std::pair<const std::string, ExampleFeature>* find_feature(const ExampleFeatures& features,
                                                                 const std::vector<std::string>& names) {
  for (const auto& name : names) {
    auto it = features.find(name);
    if (it != features.end()) return &*it;
  }
  return nullptr;
}

// "holds 3 bytes values", "is empty", for messages.
std::string describe(const ExampleFeature& f) {
  if (f.kind == ExampleFeature::Kind::kNone) return "is empty";
  return "holds " + std::to_string(f.bytes.size() + f.floats.size() + f.int64s.size()) + " " +
         feature_kind_name(f.kind) + " values";
}

// A TFRecord sample: the Example's image feature decoded into *out_image;
// returns the label feature's value.
std::int64_t decode_example_into(const RawSample& sample, std::string_view record, const FieldOptions& o,
                                 Image* out_image) {
  ExampleFeatures features;
  try {
    features = parse_example(record);
  } catch (const Error& e) {
    throw_data_corrupt(sample.where() + ": " + e.what());
  }
  const auto* image = find_feature(features, o.example_image_features);
  const auto* label = find_feature(features, o.example_label_features);
  if (image == nullptr) {
    throw_data_corrupt(sample.where() + ": tf.train.Example has no image feature (" +
                       join(o.example_image_features, "") + "); name it in example_image_features");
  }
  if (label == nullptr) {
    throw_data_corrupt(sample.where() + ": tf.train.Example has no label feature (" +
                       join(o.example_label_features, "") + "); name it in example_label_features");
  }
  const ExampleFeature& img = image->second;
  const ExampleFeature& lab = label->second;
  if (img.kind != ExampleFeature::Kind::kBytes || img.bytes.size() != 1) {
    throw_data_corrupt(sample.where() + ": image feature '" + image->first + "' " + describe(img) +
                       "; expected one encoded image (bytes)");
  }
  if (lab.kind != ExampleFeature::Kind::kInt64 || lab.int64s.size() != 1) {
    throw_data_corrupt(sample.where() + ": label feature '" + label->first + "' " + describe(lab) +
                       "; expected one int64");
  }
  try {
    decode_image_into(img.bytes[0], o.channels, out_image);
  } catch (const Error& e) {
    throw_data_corrupt(sample.where() + ", feature " + image->first + ": " + e.what());
  }
  return lab.int64s[0];
}

}  // namespace

std::int64_t parse_label(std::string_view bytes, const std::string& ext) {
  if (ext == "json") {
    nlohmann::json j = nlohmann::json::parse(bytes.begin(), bytes.end(), nullptr, false);
    if (j.is_object() && j.contains("label")) j = j["label"];
    if (j.is_number_integer()) return j.get<std::int64_t>();
    throw_data_corrupt("label ." + ext + " is not an integer nor an object with an integer \"label\"");
  }
  std::string s(bytes);
  size_t b = s.find_first_not_of(" \t\r\n"), e = s.find_last_not_of(" \t\r\n");
  if (b == std::string::npos) throw_data_corrupt("label ." + ext + " is empty");
  s = s.substr(b, e - b + 1);
  char* end = nullptr;
  long long v = std::strtoll(s.c_str(), &end, 10);
  if (*end != '\0') throw_data_corrupt("label ." + ext + " '" + s.substr(0, 32) + "' is not an integer");
  return v;
}

DecodedSample decode_sample(const RawSample& sample, const FieldOptions& o) {
  DecodedSample out;
  out.label = decode_sample_into(sample, o, &out.image);
  return out;
}

std::int64_t decode_sample_into(const RawSample& sample, const FieldOptions& o, Image* out_image) {
  if (sample.decoded) {
    if (!sample.error.empty()) throw_data_corrupt(sample.where() + ": " + sample.error);
    *out_image = sample.image;
    return sample.label;
  }
  if (sample.fields.size() == 1 && sample.fields[0].first == kTfRecordField) {
    return decode_example_into(sample, sample.fields[0].second, o, out_image);
  }
  const std::pair<std::string, std::string>* image = nullptr;
  const std::pair<std::string, std::string>* label = nullptr;
  for (const auto& want : o.image_fields) {
    for (const auto& f : sample.fields) {
      if (!image && f.first == want) image = &f;
    }
  }
  for (const auto& want : o.label_fields) {
    for (const auto& f : sample.fields) {
      if (!label && f.first == want) label = &f;
    }
  }
  if (image == nullptr) {
    throw_data_corrupt(sample.where() + ": sample has no image field (" + join(o.image_fields) + ")");
  }
  if (label == nullptr) {
    throw_data_corrupt(sample.where() + ": sample has no label field (" + join(o.label_fields) + ")");
  }
  std::int64_t value = -1;
  try {
    decode_image_into(image->second, o.channels, out_image);
  } catch (const Error& e) {
    throw_data_corrupt(sample.where() + ", field ." + image->first + ": " + e.what());
  }
  try {
    value = parse_label(label->second, label->first);
  } catch (const Error& e) {
    throw_data_corrupt(sample.where() + ", field ." + label->first + ": " + e.what());
  }
  return value;
}

}  // namespace hpct::data
