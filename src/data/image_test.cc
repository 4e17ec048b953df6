// Image codecs on real Fashion-MNIST pixels, damaged images, augmentations.
#include "data/image.h"

#include <gtest/gtest.h>

#include <cstdlib>

#include "core/error.h"
#include "data/augment.h"
#include "data/test_files.h"

namespace hpct::data {
namespace {

TEST(Image, PngIsLosslessJpegIsClose) {
  auto m = testing::load_mnist(3);
  for (const auto& img : m.images) {
    std::string png = encode_png(img);
    EXPECT_EQ(sniff_image(png), ImageFormat::kPng);
    Image back = decode_image(png);
    EXPECT_EQ(back.height, 28);
    EXPECT_EQ(back.channels, 1);
    EXPECT_EQ(back.pixels, img.pixels);
    Image rgb = decode_image(png, 3);
    EXPECT_EQ(rgb.channels, 3);
    EXPECT_EQ(rgb.pixels[3 * 100 + 2], img.pixels[100]);
    std::string jpg = encode_jpeg(img, 95);
    Image j = decode_image(jpg);
    ASSERT_EQ(j.pixels.size(), img.pixels.size());
    double err = 0;
    for (size_t i = 0; i < j.pixels.size(); ++i) err += std::abs(j.pixels[i] - img.pixels[i]);
    EXPECT_LT(err / j.pixels.size(), 4.0);
  }
}

TEST(Image, DamagedImagesAreDataCorrupt) {
  auto m = testing::load_mnist(1);
  std::string png = encode_png(m.images[0]);
  std::string jpg = encode_jpeg(m.images[0]);
  for (std::string bad : {png.substr(0, png.size() / 2), jpg.substr(0, jpg.size() / 2),
                          std::string("\x89PNG\r\n\x1a\n garbage"), std::string("\xff\xd8\xff junk"),
                          std::string("not an image")}) {
    try {
      decode_image(bad);
      ADD_FAILURE() << "decoded " << bad.size() << " damaged bytes";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kDataCorrupt);
    }
  }
}

TEST(Augment, CropFlipResize) {
  Image img;
  img.height = 2;
  img.width = 3;
  img.channels = 1;
  img.pixels = {1, 2, 3, 4, 5, 6};
  Image f = img;
  flip_horizontal(f);
  EXPECT_EQ(f.pixels, (std::vector<std::uint8_t>{3, 2, 1, 6, 5, 4}));
  Rng rng(1);
  for (int i = 0; i < 20; ++i) {
    Image c = random_crop(img, 2, 3, 1, rng);
    int sum = 0;
    for (auto v : c.pixels) sum += v;
    EXPECT_GT(sum, 0);  // the window always overlaps the image
    EXPECT_EQ(c.pixels.size(), 6u);
  }
  Image same = random_crop(img, 2, 3, 0, rng);
  EXPECT_EQ(same.pixels, img.pixels);
  Image big = resize_bilinear(img, 4, 6);
  EXPECT_EQ(big.pixels.size(), 24u);
  EXPECT_EQ(big.pixels[0], 1);
  EXPECT_EQ(big.pixels[23], 6);
  EXPECT_THROW(random_crop(img, 5, 5, 1, rng), Error);
}

}  // namespace
}  // namespace hpct::data
