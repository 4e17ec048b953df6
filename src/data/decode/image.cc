#include "data/decode/image.h"

// jpeglib.h needs size_t and FILE declared first.
#include <cstdio>
#include <cstring>
#include <csetjmp>

#include <jpeglib.h>
#include <jerror.h>
#include <png.h>

#include "core/error.h"
#include "data/decode/png_fast.h"

namespace hpct::data {
namespace {

// libjpeg reports errors through a callback that must not return; we
// longjmp back to the frame that called setjmp. That frame holds only
// trivially destructible locals between setjmp and the jump.
struct JpegError {
  jpeg_error_mgr mgr;
  std::jmp_buf jump;
  char message[JMSG_LENGTH_MAX];
};

void jpeg_error_exit(j_common_ptr cinfo) {
  auto* err = reinterpret_cast<JpegError*>(cinfo->err);
  (*cinfo->err->format_message)(cinfo, err->message);
  std::longjmp(err->jump, 1);
}

// Warnings are not failures, except a stream that ends early: libjpeg
// would fill the missing rows with grey, and we would train on it.
void jpeg_warning(j_common_ptr cinfo, int level) {
  if (level < 0 && cinfo->err->msg_code == JWRN_JPEG_EOF) jpeg_error_exit(cinfo);
}

// Returns false with err->message set on failure.
bool jpeg_decode_into(const unsigned char* data, size_t n, int channels, Image* out,
                      JpegError* err) {
  jpeg_decompress_struct cinfo;
  cinfo.err = jpeg_std_error(&err->mgr);
  err->mgr.error_exit = jpeg_error_exit;
  err->mgr.emit_message = jpeg_warning;
  if (setjmp(err->jump)) {
    jpeg_destroy_decompress(&cinfo);
    return false;
  }
  jpeg_create_decompress(&cinfo);
  jpeg_mem_src(&cinfo, data, static_cast<unsigned long>(n));
  jpeg_read_header(&cinfo, TRUE);
  if (channels == 1) cinfo.out_color_space = JCS_GRAYSCALE;
  else if (channels == 3 || cinfo.jpeg_color_space != JCS_GRAYSCALE) cinfo.out_color_space = JCS_RGB;
  jpeg_start_decompress(&cinfo);
  out->width = static_cast<int>(cinfo.output_width);
  out->height = static_cast<int>(cinfo.output_height);
  out->channels = cinfo.output_components;
  const size_t row = static_cast<size_t>(out->width) * out->channels;
  out->pixels.resize(row * out->height);
  while (cinfo.output_scanline < cinfo.output_height) {
    JSAMPROW rows[4];
    int k = 0;
    for (; k < 4 && cinfo.output_scanline + k < cinfo.output_height; ++k) {
      rows[k] = out->pixels.data() + row * (cinfo.output_scanline + k);
    }
    jpeg_read_scanlines(&cinfo, rows, static_cast<JDIMENSION>(k));
  }
  jpeg_finish_decompress(&cinfo);
  jpeg_destroy_decompress(&cinfo);
  return true;
}

bool jpeg_encode_into(const Image& img, int quality, std::string* out, JpegError* err) {
  jpeg_compress_struct cinfo;
  unsigned char* buf = nullptr;
  unsigned long size = 0;
  cinfo.err = jpeg_std_error(&err->mgr);
  err->mgr.error_exit = jpeg_error_exit;
  if (setjmp(err->jump)) {
    jpeg_destroy_compress(&cinfo);
    std::free(buf);
    return false;
  }
  jpeg_create_compress(&cinfo);
  jpeg_mem_dest(&cinfo, &buf, &size);
  cinfo.image_width = static_cast<JDIMENSION>(img.width);
  cinfo.image_height = static_cast<JDIMENSION>(img.height);
  cinfo.input_components = img.channels;
  cinfo.in_color_space = img.channels == 1 ? JCS_GRAYSCALE : JCS_RGB;
  jpeg_set_defaults(&cinfo);
  jpeg_set_quality(&cinfo, quality, TRUE);
  jpeg_start_compress(&cinfo, TRUE);
  const size_t row = static_cast<size_t>(img.width) * img.channels;
  while (cinfo.next_scanline < cinfo.image_height) {
    JSAMPROW r = const_cast<JSAMPLE*>(img.pixels.data() + row * cinfo.next_scanline);
    jpeg_write_scanlines(&cinfo, &r, 1);
  }
  jpeg_finish_compress(&cinfo);
  jpeg_destroy_compress(&cinfo);
  out->assign(reinterpret_cast<char*>(buf), size);
  std::free(buf);
  return true;
}

void check_encodable(const Image& img, const char* what) {
  if ((img.channels != 1 && img.channels != 3) || img.width <= 0 || img.height <= 0 ||
      img.pixels.size() != static_cast<size_t>(img.width) * img.height * img.channels) {
    throw_invalid_argument(std::string(what) + ": need a 1- or 3-channel image whose pixels match " +
                           std::to_string(img.height) + "x" + std::to_string(img.width) + "x" +
                           std::to_string(img.channels));
  }
}

}  // namespace

// png_decode_fast, else libpng's simplified API, into out's reused buffer
// (defined below).
void png_decode_into(std::string_view bytes, int channels, Image* out);

ImageFormat sniff_image(std::string_view b) {
  if (b.size() >= 8 && std::memcmp(b.data(), "\x89PNG\r\n\x1a\n", 8) == 0) return ImageFormat::kPng;
  if (b.size() >= 3 && static_cast<unsigned char>(b[0]) == 0xff &&
      static_cast<unsigned char>(b[1]) == 0xd8 && static_cast<unsigned char>(b[2]) == 0xff) {
    return ImageFormat::kJpeg;
  }
  return ImageFormat::kUnknown;
}

Image decode_image(std::string_view bytes, int channels) {
  switch (sniff_image(bytes)) {
    case ImageFormat::kPng:
      return decode_png(bytes, channels);
    case ImageFormat::kJpeg:
      return decode_jpeg(bytes, channels);
    default:
      throw_data_corrupt("image of " + std::to_string(bytes.size()) +
                         " bytes is neither PNG nor JPEG (unknown magic bytes)");
  }
}

void decode_image_into(std::string_view bytes, int channels, Image* out) {
  switch (sniff_image(bytes)) {
    case ImageFormat::kPng:
      png_decode_into(bytes, channels, out);
      return;
    case ImageFormat::kJpeg: {
      JpegError err;
      if (!jpeg_decode_into(reinterpret_cast<const unsigned char*>(bytes.data()), bytes.size(),
                            channels, out, &err)) {
        throw_data_corrupt(std::string("JPEG does not decode: ") + err.message);
      }
      return;
    }
    default:
      throw_data_corrupt("image of " + std::to_string(bytes.size()) +
                         " bytes is neither PNG nor JPEG (unknown magic bytes)");
  }
}

Image decode_png(std::string_view bytes, int channels) {
  Image img;
  png_decode_into(bytes, channels, &img);
  return img;
}

void png_decode_into(std::string_view bytes, int channels, Image* out) {
  if (png_decode_fast(bytes, channels, out)) return;
  png_image png;
  std::memset(&png, 0, sizeof png);
  png.version = PNG_IMAGE_VERSION;
  if (!png_image_begin_read_from_memory(&png, bytes.data(), bytes.size())) {
    std::string msg = png.message;
    png_image_free(&png);
    throw_data_corrupt("PNG does not decode: " + msg);
  }
  const bool color = (png.format & PNG_FORMAT_FLAG_COLOR) != 0;
  const int c = channels != 0 ? channels : (color ? 3 : 1);
  png.format = c == 1 ? PNG_FORMAT_GRAY : PNG_FORMAT_RGB;
  out->width = static_cast<int>(png.width);
  out->height = static_cast<int>(png.height);
  out->channels = c;
  out->pixels.resize(PNG_IMAGE_SIZE(png));
  // Alpha is composited on black; 16-bit samples are reduced to 8.
  if (!png_image_finish_read(&png, nullptr, out->pixels.data(), 0, nullptr)) {
    std::string msg = png.message;
    png_image_free(&png);
    throw_data_corrupt("PNG does not decode: " + msg);
  }
}

Image decode_jpeg(std::string_view bytes, int channels) {
  Image img;
  JpegError err;
  if (!jpeg_decode_into(reinterpret_cast<const unsigned char*>(bytes.data()), bytes.size(), channels,
                        &img, &err)) {
    throw_data_corrupt(std::string("JPEG does not decode: ") + err.message);
  }
  return img;
}

std::string encode_png(const Image& img) {
  check_encodable(img, "encode_png");
  png_image png;
  std::memset(&png, 0, sizeof png);
  png.version = PNG_IMAGE_VERSION;
  png.width = static_cast<png_uint_32>(img.width);
  png.height = static_cast<png_uint_32>(img.height);
  png.format = img.channels == 1 ? PNG_FORMAT_GRAY : PNG_FORMAT_RGB;
  png_alloc_size_t size = 0;
  if (!png_image_write_to_memory(&png, nullptr, &size, 0, img.pixels.data(), 0, nullptr)) {
    throw_invalid_argument(std::string("encode_png: ") + png.message);
  }
  std::string out(size, '\0');
  if (!png_image_write_to_memory(&png, out.data(), &size, 0, img.pixels.data(), 0, nullptr)) {
    throw_invalid_argument(std::string("encode_png: ") + png.message);
  }
  out.resize(size);
  return out;
}

std::string encode_jpeg(const Image& img, int quality) {
  check_encodable(img, "encode_jpeg");
  std::string out;
  JpegError err;
  if (!jpeg_encode_into(img, quality, &out, &err)) {
    throw_invalid_argument(std::string("encode_jpeg: ") + err.message);
  }
  return out;
}

}  // namespace hpct::data
