// Reduced-size, region-only JPEG decoding through libjpeg-turbo's libjpeg API: DCT scaling
// decodes a crop that will be shrunk anyway at 1/2..7/8 of the work, and columns and rows
// outside the crop skip the IDCT and colour conversion.
#include "data/jpeg.h"

#include <algorithm>
#include <cstring>

#include "core/error.h"

#ifdef MPX_WITH_LIBJPEG
#include <csetjmp>
// jpeglib.h needs size_t and FILE declared first.
#include <jpeglib.h>
#endif

namespace mpx::data {

#ifdef MPX_WITH_LIBJPEG
namespace {
// libjpeg reports errors by longjmp out of its calls. Each guarded step below is a plain
// function with no C++ object alive across the jump, so nothing is skipped unwinding.
struct Decoder {
  jpeg_decompress_struct cinfo{};
  jpeg_error_mgr err{};
  std::jmp_buf jump{};
  char message[JMSG_LENGTH_MAX] = {};
  bool created = false;
  ~Decoder() {
    if (created) jpeg_destroy_decompress(&cinfo);
  }
};

void on_error(j_common_ptr c) {
  auto* d = reinterpret_cast<Decoder*>(c->client_data);
  (*c->err->format_message)(c, d->message);
  std::longjmp(d->jump, 1);
}
// Warnings (a premature end of data, a corrupt marker) fail the decode, as TurboJPEG's
// TJFLAG_STOPONWARNING does for decode_jpeg: a half-grey image is not a training sample.
void on_message(j_common_ptr c, int level) {
  if (level < 0) on_error(c);
}

bool read_header(Decoder& d, const unsigned char* data, unsigned long n) {
  if (setjmp(d.jump)) return false;
  d.cinfo.err = jpeg_std_error(&d.err);
  d.err.error_exit = on_error;
  d.err.emit_message = on_message;
  d.cinfo.client_data = &d;
  jpeg_create_decompress(&d.cinfo);
  d.created = true;
  jpeg_mem_src(&d.cinfo, data, n);
  jpeg_read_header(&d.cinfo, TRUE);
  return true;
}

bool start(Decoder& d, int scale, JDIMENSION* x0, JDIMENSION* width, JDIMENSION* full_w, JDIMENSION* full_h) {
  if (setjmp(d.jump)) return false;
  d.cinfo.scale_num = static_cast<unsigned>(scale);
  d.cinfo.scale_denom = 8;
  d.cinfo.out_color_space = JCS_RGB;  // greyscale is expanded to RGB by libjpeg
  d.cinfo.dct_method = JDCT_ISLOW;    // TurboJPEG's default, so full-size output matches decode_jpeg
  jpeg_start_decompress(&d.cinfo);
  *full_w = d.cinfo.output_width;  // before jpeg_crop_scanline narrows it
  *full_h = d.cinfo.output_height;
  if (*x0 > 0 || *width < d.cinfo.output_width) jpeg_crop_scanline(&d.cinfo, x0, width);
  return true;
}

bool read_rows(Decoder& d, unsigned y0, unsigned y1, unsigned char* out, size_t stride, unsigned char* spare) {
  if (setjmp(d.jump)) return false;
  if (y0 > 0) jpeg_skip_scanlines(&d.cinfo, y0);
  for (unsigned y = y0; y < y1;) {
    JSAMPROW row = out + static_cast<size_t>(y - y0) * stride;
    y += jpeg_read_scanlines(&d.cinfo, &row, 1);
  }
  // The rest is skipped, not abandoned: skipping parses the entropy-coded data (only the IDCT
  // and colour conversion are saved), so truncation and corruption anywhere in the file fail
  // here as in a full decode. The last row is read, not skipped, since a skip to the very end
  // returns without parsing anything; `spare` receives it.
  if (d.cinfo.output_scanline < d.cinfo.output_height) {
    jpeg_skip_scanlines(&d.cinfo, d.cinfo.output_height - 1 - d.cinfo.output_scanline);
    JSAMPROW row = spare;
    while (d.cinfo.output_scanline < d.cinfo.output_height) jpeg_read_scanlines(&d.cinfo, &row, 1);
  }
  jpeg_finish_decompress(&d.cinfo);
  return true;
}
}  // namespace

bool have_jpeg_region_decode() { return true; }

JpegRegion decode_jpeg_region(const std::vector<uint8_t>& bytes, const std::string& path, int64_t max_pixels,
                              const std::function<JpegPlan(int, int)>& plan, std::vector<uint8_t>& pixels) {
  Decoder d;
  auto fail = [&](const char* what) {
    MPX_ERROR("read_image: cannot decode ", path, ": ", what, ": ", d.message,
              " (corrupt, truncated or not a JPEG/PNG/BMP image)");
  };
  if (!read_header(d, bytes.data(), static_cast<unsigned long>(bytes.size()))) fail("its JPEG header");
  JpegRegion r;
  r.full_width = static_cast<int>(d.cinfo.image_width);
  r.full_height = static_cast<int>(d.cinfo.image_height);
  MPX_CHECK(r.full_width > 0 && r.full_height > 0, "read_image: cannot decode ", path, ": the header gives an empty image");
  MPX_CHECK(static_cast<int64_t>(r.full_width) * r.full_height <= max_pixels, "read_image: cannot decode ", path,
            ": its header declares ", r.full_width, "x", r.full_height, " pixels, more than the ", max_pixels,
            " mpx decodes (the decompression-bomb limit, as PIL's; data::set_max_image_pixels)");
  const JpegPlan p = plan(r.full_width, r.full_height);
  MPX_CHECK(p.scale >= 1 && p.scale <= 8, "decode_jpeg_region: scale must be 1..8 eighths, got ", p.scale);
  r.scale = p.scale;
  r.scaled_width = static_cast<int>(jpeg_scaled_size(r.full_width, p.scale));
  r.scaled_height = static_cast<int>(jpeg_scaled_size(r.full_height, p.scale));
  const int x0 = std::clamp(p.x0, 0, r.scaled_width - 1), x1 = std::clamp(p.x1, x0 + 1, r.scaled_width);
  const int y0 = std::clamp(p.y0, 0, r.scaled_height - 1), y1 = std::clamp(p.y1, y0 + 1, r.scaled_height);
  auto cx = static_cast<JDIMENSION>(x0), cw = static_cast<JDIMENSION>(x1 - x0);
  JDIMENSION sw = 0, sh = 0;
  if (!start(d, p.scale, &cx, &cw, &sw, &sh)) fail("its JPEG data");
  MPX_CHECK(static_cast<int>(sw) == r.scaled_width && static_cast<int>(sh) == r.scaled_height &&
                d.cinfo.output_components == 3,
            "decode_jpeg_region: ", path, ": libjpeg scaled to ", sw, "x", sh,
            ", not the expected ", r.scaled_width, "x", r.scaled_height);
  r.x0 = static_cast<int>(cx);
  r.width = static_cast<int>(cw);
  r.y0 = y0;
  r.height = y1 - y0;
  const size_t stride = static_cast<size_t>(r.width) * 3;
  pixels.resize(stride * static_cast<size_t>(r.height + 1));  // + the row read_rows discards
  unsigned char* spare = pixels.data() + stride * static_cast<size_t>(r.height);
  if (!read_rows(d, static_cast<unsigned>(y0), static_cast<unsigned>(y1), pixels.data(), stride, spare))
    fail("its JPEG data");
  return r;
}
#else
bool have_jpeg_region_decode() { return false; }

JpegRegion decode_jpeg_region(const std::vector<uint8_t>&, const std::string& path, int64_t,
                              const std::function<JpegPlan(int, int)>&, std::vector<uint8_t>&) {
  MPX_ERROR("read_image: ", path, ": this build has no libjpeg-turbo region decoding (install libjpeg62-turbo-dev "
            "and rebuild)");
}
#endif

}  // namespace mpx::data
