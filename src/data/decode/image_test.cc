// Image codecs on real Fashion-MNIST pixels, damaged images, augmentations.
#include "data/decode/image.h"

#include <gtest/gtest.h>

#include <png.h>
#include <zlib.h>

#include <cstdlib>
#include <cstring>

#include "core/error.h"
#include "data/decode/augment.h"
#include "data/decode/png_fast.h"
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

// libpng's simplified API, called directly: the reference the fast path
// must match.
Image libpng_decode(const std::string& bytes, int channels) {
  png_image png;
  std::memset(&png, 0, sizeof png);
  png.version = PNG_IMAGE_VERSION;
  EXPECT_TRUE(png_image_begin_read_from_memory(&png, bytes.data(), bytes.size())) << png.message;
  png.format = channels == 1 ? PNG_FORMAT_GRAY : PNG_FORMAT_RGB;
  Image out;
  out.height = static_cast<int>(png.height);
  out.width = static_cast<int>(png.width);
  out.channels = channels;
  out.pixels.resize(PNG_IMAGE_SIZE(png));
  EXPECT_TRUE(png_image_finish_read(&png, nullptr, out.pixels.data(), 0, nullptr)) << png.message;
  return out;
}

void put32(std::string* s, std::uint32_t v) {
  for (int shift = 24; shift >= 0; shift -= 8) s->push_back(static_cast<char>(v >> shift));
}

void put_chunk(std::string* png, const char* type, const std::string& data) {
  put32(png, static_cast<std::uint32_t>(data.size()));
  std::string body = std::string(type, 4) + data;
  *png += body;
  put32(png, static_cast<std::uint32_t>(
                 crc32(0, reinterpret_cast<const Bytef*>(body.data()), static_cast<uInt>(body.size()))));
}

// A PNG written by hand with every row under one filter type (libpng's
// writer picks filters itself), its data split over idat_chunks IDATs.
std::string png_with_filter(const Image& img, int filter, int idat_chunks) {
  const size_t bpp = static_cast<size_t>(img.channels), stride = img.width * bpp;
  std::string rows;
  for (int y = 0; y < img.height; ++y) {
    const std::uint8_t* cur = img.pixels.data() + y * stride;
    const std::uint8_t* up = y > 0 ? cur - stride : nullptr;
    rows.push_back(static_cast<char>(filter));
    for (size_t i = 0; i < stride; ++i) {
      const int a = i >= bpp ? cur[i - bpp] : 0, b = up ? up[i] : 0, c = up && i >= bpp ? up[i - bpp] : 0;
      int pred = 0;
      if (filter == 1) pred = a;
      if (filter == 2) pred = b;
      if (filter == 3) pred = (a + b) / 2;
      if (filter == 4) {
        const int p = a + b - c, pa = std::abs(p - a), pb = std::abs(p - b), pc = std::abs(p - c);
        pred = pa <= pb && pa <= pc ? a : pb <= pc ? b : c;
      }
      rows.push_back(static_cast<char>(cur[i] - pred));
    }
  }
  uLongf len = compressBound(static_cast<uLong>(rows.size()));
  std::string z(len, '\0');
  EXPECT_EQ(compress2(reinterpret_cast<Bytef*>(z.data()), &len, reinterpret_cast<const Bytef*>(rows.data()),
                      static_cast<uLong>(rows.size()), 6),
            Z_OK);
  z.resize(len);
  std::string png = "\x89PNG\r\n\x1a\n", ihdr;
  put32(&ihdr, static_cast<std::uint32_t>(img.width));
  put32(&ihdr, static_cast<std::uint32_t>(img.height));
  ihdr += std::string{8, static_cast<char>(img.channels == 1 ? 0 : 2), 0, 0, 0};
  put_chunk(&png, "IHDR", ihdr);
  put_chunk(&png, "tEXt", std::string("Comment\0by hand", 15));
  const size_t piece = z.size() / idat_chunks + 1;
  for (size_t off = 0; off < z.size(); off += piece) put_chunk(&png, "IDAT", z.substr(off, piece));
  put_chunk(&png, "IEND", "");
  return png;
}

TEST(Image, PngFastPathGivesLibpngsPixelsOnRealImages) {
  auto m = testing::load_mnist(1000);
  Image fast;
  for (const auto& img : m.images) {
    std::string png = encode_png(img);  // libpng's writer: adaptive filters, an sRGB chunk
    ASSERT_TRUE(png_decode_fast(png, 0, &fast)) << "the fast path refused a libpng-written gray PNG";
    EXPECT_EQ(fast.pixels, img.pixels);
    EXPECT_EQ(fast.pixels, libpng_decode(png, 1).pixels);
    EXPECT_EQ(fast.width, 28);
    EXPECT_EQ(fast.channels, 1);
  }
}

TEST(Image, PngFastPathUndoesEveryRowFilterInGrayAndRgb) {
  auto m = testing::load_mnist(3);
  Image rgb;
  rgb.height = 28;
  rgb.width = 28;
  rgb.channels = 3;
  for (size_t i = 0; i < 28 * 28; ++i) {
    for (size_t c = 0; c < 3; ++c) rgb.pixels.push_back(m.images[c].pixels[i]);
  }
  for (const Image* img : {&m.images[0], &rgb}) {
    for (int filter = 0; filter <= 4; ++filter) {
      for (int chunks : {1, 3}) {
        SCOPED_TRACE("channels " + std::to_string(img->channels) + ", filter " + std::to_string(filter) +
                     ", IDAT chunks " + std::to_string(chunks));
        std::string png = png_with_filter(*img, filter, chunks);
        Image fast;
        ASSERT_TRUE(png_decode_fast(png, 0, &fast));
        EXPECT_EQ(fast.channels, img->channels);
        EXPECT_EQ(fast.pixels, img->pixels);
        EXPECT_EQ(libpng_decode(png, img->channels).pixels, img->pixels);
      }
    }
  }
}

TEST(Image, PngFastPathLeavesConversionsAndDamageToLibpng) {
  auto m = testing::load_mnist(1);
  std::string png = encode_png(m.images[0]);
  Image out;
  // Gray asked for as RGB: libpng converts.
  EXPECT_FALSE(png_decode_fast(png, 3, &out));
  EXPECT_EQ(decode_image(png, 3).pixels, libpng_decode(png, 3).pixels);
  // One flipped bit in the image data: the CRC no longer matches, and the
  // caller's libpng names the damage.
  std::string flipped = png;
  const size_t idat = flipped.find("IDAT");
  ASSERT_NE(idat, std::string::npos);
  flipped[idat + 10] = static_cast<char>(flipped[idat + 10] ^ 0x10);
  EXPECT_FALSE(png_decode_fast(flipped, 0, &out));
  try {
    decode_image(flipped);
    ADD_FAILURE() << "decoded a PNG with a flipped bit";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kDataCorrupt);
    EXPECT_NE(std::string(e.what()).find("PNG does not decode"), std::string::npos) << e.what();
  }
  // A bit depth it does not handle (16) goes to libpng too.
  Image wide = m.images[0];
  std::string hand = png_with_filter(wide, 0, 1);
  hand[8 + 8 + 8] = 16;  // IHDR's bit depth; its CRC is now wrong as well
  EXPECT_FALSE(png_decode_fast(hand, 0, &out));
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
