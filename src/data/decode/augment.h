// Image augmentations on 8-bit HWC images: resize, random crop with
// padding, horizontal flip; and the mean/std normalization applied while a
// batch is written as float.
//
// Randomness comes from an Rng the caller seeds per sample (from seed,
// epoch and sample id), so a sample is augmented the same way whichever
// thread decodes it, and a resumed run repeats the original exactly.
#pragma once

#include <vector>

#include "data/random.h"
#include "data/sample.h"

namespace hpct::data {

struct AugmentOptions {
  int resize_height = 0;  // 0: no resize; bilinear otherwise
  int resize_width = 0;
  int crop_height = 0;    // 0: no crop; else a random window of this size...
  int crop_width = 0;
  int crop_padding = 0;   // ...of the image zero-padded by this much on each side
  bool hflip = false;     // mirror left-right with probability 1/2

  bool any() const {
    return resize_height > 0 || crop_height > 0 || crop_padding > 0 || hflip;
  }
};

// InvalidArgument for negative sizes or a crop larger than the padded image.
Image resize_bilinear(const Image& in, int height, int width);
Image random_crop(const Image& in, int height, int width, int padding, Rng& rng);
void flip_horizontal(Image& img);
// Applies resize, crop, then flip, as configured.
Image augment(Image img, const AugmentOptions& options, Rng& rng);

}  // namespace hpct::data
