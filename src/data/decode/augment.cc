#include "data/decode/augment.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"

namespace hpct::data {

Image resize_bilinear(const Image& in, int height, int width) {
  if (height <= 0 || width <= 0) throw_invalid_argument("resize to a non-positive size");
  if (in.height == height && in.width == width) return in;
  Image out;
  out.height = height;
  out.width = width;
  out.channels = in.channels;
  out.pixels.resize(static_cast<size_t>(height) * width * in.channels);
  const int c = in.channels;
  // Pixel centres aligned (align_corners=false, as torchvision does).
  const float sy = static_cast<float>(in.height) / height, sx = static_cast<float>(in.width) / width;
  std::vector<int> x0(width), x1(width);
  std::vector<float> fx(width);
  for (int x = 0; x < width; ++x) {
    float src = std::max(0.0f, (x + 0.5f) * sx - 0.5f);
    x0[x] = std::min(static_cast<int>(src), in.width - 1);
    x1[x] = std::min(x0[x] + 1, in.width - 1);
    fx[x] = src - x0[x];
  }
  for (int y = 0; y < height; ++y) {
    float src = std::max(0.0f, (y + 0.5f) * sy - 0.5f);
    int y0 = std::min(static_cast<int>(src), in.height - 1), y1 = std::min(y0 + 1, in.height - 1);
    float fy = src - y0;
    const std::uint8_t* r0 = in.pixels.data() + static_cast<size_t>(y0) * in.width * c;
    const std::uint8_t* r1 = in.pixels.data() + static_cast<size_t>(y1) * in.width * c;
    std::uint8_t* o = out.pixels.data() + static_cast<size_t>(y) * width * c;
    for (int x = 0; x < width; ++x) {
      for (int k = 0; k < c; ++k) {
        float top = r0[x0[x] * c + k] + (r0[x1[x] * c + k] - r0[x0[x] * c + k]) * fx[x];
        float bot = r1[x0[x] * c + k] + (r1[x1[x] * c + k] - r1[x0[x] * c + k]) * fx[x];
        o[x * c + k] = static_cast<std::uint8_t>(std::lround(top + (bot - top) * fy));
      }
    }
  }
  return out;
}

Image random_crop(const Image& in, int height, int width, int padding, Rng& rng) {
  const int ph = in.height + 2 * padding, pw = in.width + 2 * padding;
  if (padding < 0 || height <= 0 || width <= 0 || height > ph || width > pw) {
    throw_invalid_argument("random crop " + std::to_string(height) + "x" + std::to_string(width) +
                           " with padding " + std::to_string(padding) + " does not fit a " +
                           std::to_string(in.height) + "x" + std::to_string(in.width) + " image");
  }
  const int top = static_cast<int>(rng.below(static_cast<std::uint64_t>(ph - height + 1)));
  const int left = static_cast<int>(rng.below(static_cast<std::uint64_t>(pw - width + 1)));
  Image out;
  out.height = height;
  out.width = width;
  out.channels = in.channels;
  out.pixels.assign(static_cast<size_t>(height) * width * in.channels, 0);
  const int c = in.channels;
  for (int y = 0; y < height; ++y) {
    const int sy = top + y - padding;
    if (sy < 0 || sy >= in.height) continue;
    // The columns of this output row that fall inside the source image.
    const int x_begin = std::max(0, padding - left), x_end = std::min(width, in.width + padding - left);
    if (x_begin >= x_end) continue;
    const int sx = left + x_begin - padding;
    std::copy_n(in.pixels.data() + (static_cast<size_t>(sy) * in.width + sx) * c,
                static_cast<size_t>(x_end - x_begin) * c,
                out.pixels.data() + (static_cast<size_t>(y) * width + x_begin) * c);
  }
  return out;
}

void flip_horizontal(Image& img) {
  const int c = img.channels;
  for (int y = 0; y < img.height; ++y) {
    std::uint8_t* row = img.pixels.data() + static_cast<size_t>(y) * img.width * c;
    for (int a = 0, b = img.width - 1; a < b; ++a, --b) {
      for (int k = 0; k < c; ++k) std::swap(row[a * c + k], row[b * c + k]);
    }
  }
}

Image augment(Image img, const AugmentOptions& o, Rng& rng) {
  if (o.resize_height > 0) img = resize_bilinear(img, o.resize_height, o.resize_width);
  if (o.crop_height > 0 || o.crop_padding > 0) {
    const int h = o.crop_height > 0 ? o.crop_height : img.height;
    const int w = o.crop_width > 0 ? o.crop_width : img.width;
    img = random_crop(img, h, w, o.crop_padding, rng);
  }
  if (o.hflip && (rng.next() & 1)) flip_horizontal(img);
  return img;
}

}  // namespace hpct::data
