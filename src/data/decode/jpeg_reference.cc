#include "data/decode/jpeg_reference.h"

#include <csetjmp>
#include <cstdio>

#include <jpeglib.h>

#include "core/error.h"

namespace hpct::data {
namespace {

struct RefError {
  jpeg_error_mgr mgr;
  std::jmp_buf jump;
};

void ref_error_exit(j_common_ptr cinfo) { std::longjmp(reinterpret_cast<RefError*>(cinfo->err)->jump, 1); }

// One reused buffer, no per-image allocation beyond libjpeg's own.
bool decode_one(const std::string& bytes, std::vector<unsigned char>* buf, std::uint64_t* out) {
  jpeg_decompress_struct cinfo;
  RefError err;
  cinfo.err = jpeg_std_error(&err.mgr);
  err.mgr.error_exit = ref_error_exit;
  if (setjmp(err.jump)) {
    jpeg_destroy_decompress(&cinfo);
    return false;
  }
  jpeg_create_decompress(&cinfo);
  jpeg_mem_src(&cinfo, reinterpret_cast<const unsigned char*>(bytes.data()),
               static_cast<unsigned long>(bytes.size()));
  jpeg_read_header(&cinfo, TRUE);
  jpeg_start_decompress(&cinfo);
  const size_t row = static_cast<size_t>(cinfo.output_width) * cinfo.output_components;
  if (buf->size() < row * cinfo.output_height) buf->resize(row * cinfo.output_height);
  while (cinfo.output_scanline < cinfo.output_height) {
    JSAMPROW r = buf->data() + row * cinfo.output_scanline;
    jpeg_read_scanlines(&cinfo, &r, 1);
  }
  *out += row * cinfo.output_height;
  jpeg_finish_decompress(&cinfo);
  jpeg_destroy_decompress(&cinfo);
  return true;
}

}  // namespace

std::uint64_t reference_jpeg_decode(const std::vector<std::string>& images, int passes) {
  std::vector<unsigned char> buf;
  std::uint64_t bytes = 0;
  for (int p = 0; p < passes; ++p) {
    for (const auto& img : images) {
      if (!decode_one(img, &buf, &bytes)) throw_data_corrupt("reference JPEG decode failed");
    }
  }
  return bytes;
}

}  // namespace hpct::data
