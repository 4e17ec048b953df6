#include "data/formats/pack.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>

#include "core/error.h"
#include "data/formats/example.h"
#include "data/formats/idx.h"
#include "data/decode/image.h"
#include "data/random.h"

namespace hpct::data {

std::string encode_image_example(std::string_view encoded, std::string_view format, std::int64_t label,
                                 int height, int width) {
  ExampleWriter w;
  w.add_bytes("image/encoded", {encoded});
  w.add_bytes("image/format", {format});
  w.add_int64("image/class/label", {label});
  if (height > 0) w.add_int64("image/height", {height});
  if (width > 0) w.add_int64("image/width", {width});
  return w.finish();
}

PackResult pack_fashion_mnist(const std::string& dir, const std::string& split,
                              const std::string& image_format, ShardWriterOptions out,
                              const PackProgress& progress) {
  if (image_format != "png" && image_format != "jpg") {
    throw_invalid_argument("--image-format " + image_format + ": expected png or jpg");
  }
  auto [images_path, labels_path] = fashion_mnist_files(dir, split);
  IdxArray images = read_idx(images_path);
  IdxArray labels = read_idx(labels_path);
  if (images.dims.size() != 3 || labels.dims.size() != 1 || images.items() != labels.items()) {
    throw_data_corrupt("Fashion-MNIST " + split + ": " + images_path + " and " + labels_path +
                       " do not hold matching images and labels");
  }
  const ShardFormat writer_format = out.format;
  ShardWriter writer(std::move(out));
  const std::uint64_t n = images.items();
  Image img;
  img.height = static_cast<int>(images.dims[1]);
  img.width = static_cast<int>(images.dims[2]);
  img.channels = 1;
  const std::uint64_t size = images.item_size();
  for (std::uint64_t i = 0; i < n; ++i) {
    img.pixels.assign(images.values.begin() + static_cast<std::ptrdiff_t>(i * size),
                      images.values.begin() + static_cast<std::ptrdiff_t>((i + 1) * size));
    char key[32];
    std::snprintf(key, sizeof key, "%06llu", static_cast<unsigned long long>(i));
    std::string encoded = image_format == "png" ? encode_png(img) : encode_jpeg(img, 95);
    if (writer_format == ShardFormat::kTfRecord) {
      writer.write_record(encode_image_example(encoded, image_format == "png" ? "png" : "jpeg",
                                               labels.values[i], img.height, img.width));
    } else {
      writer.write(key, {{image_format, std::move(encoded)}, {"cls", std::to_string(labels.values[i])}});
    }
    if (progress) progress(i + 1, n);
  }
  writer.close();
  return {writer.samples(), writer.bytes(), writer.shards(), {}};
}

PackResult pack_folder(const std::string& dir, std::int64_t shuffle_seed, ShardWriterOptions out,
                       const PackProgress& progress) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) throw_invalid_argument("--from folder " + dir + ": not a directory");
  std::vector<std::string> classes;
  for (const auto& e : fs::directory_iterator(dir)) {
    if (e.is_directory()) classes.push_back(e.path().filename().string());
  }
  std::sort(classes.begin(), classes.end());
  if (classes.empty()) {
    throw_invalid_argument("--from folder " + dir + ": no class sub-folders (expected DIR/<class>/<image>)");
  }
  struct Item {
    std::string path, key, ext;
    std::int64_t label;
  };
  std::vector<Item> items;
  for (size_t c = 0; c < classes.size(); ++c) {
    std::vector<fs::path> files;
    for (const auto& e : fs::directory_iterator(fs::path(dir) / classes[c])) {
      if (e.is_regular_file()) files.push_back(e.path());
    }
    std::sort(files.begin(), files.end());
    for (const auto& f : files) {
      std::string ext = f.extension().string();
      for (auto& ch : ext) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
      if (ext != ".jpg" && ext != ".jpeg" && ext != ".png") continue;
      std::string stem = f.stem().string();
      std::replace(stem.begin(), stem.end(), '.', '_');
      items.push_back({f.string(), classes[c] + "/" + stem, ext.substr(1), static_cast<std::int64_t>(c)});
    }
  }
  if (shuffle_seed >= 0) {
    Rng rng(static_cast<std::uint64_t>(shuffle_seed));
    for (size_t i = items.size(); i > 1; --i) std::swap(items[i - 1], items[rng.below(i)]);
  }
  ShardWriter writer(out);
  for (size_t i = 0; i < items.size(); ++i) {
    std::string encoded = read_whole_file(*out.fs, items[i].path);
    if (out.format == ShardFormat::kTfRecord) {
      writer.write_record(encode_image_example(encoded, items[i].ext == "png" ? "png" : "jpeg", items[i].label));
    } else {
      writer.write(items[i].key, {{items[i].ext, std::move(encoded)}, {"cls", std::to_string(items[i].label)}});
    }
    if (progress) progress(i + 1, items.size());
  }
  writer.close();
  return {writer.samples(), writer.bytes(), writer.shards(), classes};
}

}  // namespace hpct::data
