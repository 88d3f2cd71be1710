// JPEG decoding through libjpeg-turbo (when the build found it; stb_image is the fallback).
#pragma once
#include <cstdint>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "core/tensor.h"

namespace mpx::data {

/// True when this build decodes JPEGs with libjpeg-turbo (TurboJPEG API).
bool have_libjpeg_turbo();

/// Decodes the JPEG file `f` (already open, read from the start; `path` names it in errors) to
/// u8 [H,W,C] with C = `channels` (1, 2, 3 or 4; 0 keeps the stored count: 1 for grayscale,
/// else 3). The header's size is checked against `max_pixels` before any decoding; corrupt or
/// truncated data (libjpeg's warnings included) is an mpx::Error naming `path`. Only when
/// have_libjpeg_turbo().
Tensor decode_jpeg(std::FILE* f, const std::string& path, int channels, int64_t max_pixels);

/// True when this build can decode part of a JPEG at reduced size (libjpeg-turbo's libjpeg API:
/// DCT scaling, jpeg_crop_scanline, jpeg_skip_scanlines).
bool have_jpeg_region_decode();

/// What to decode of a JPEG, chosen once its size is known: the image scaled by `scale`/8
/// (1..8; the DCT does the scaling, so 1/8 costs about a tenth of a full decode), and of that
/// scaled image the columns [x0, x1) and rows [y0, y1).
struct JpegPlan {
  int scale = 8;
  int x0 = 0, y0 = 0, x1 = 0, y1 = 0;
};

/// The size libjpeg gives a side of `size` pixels decoded at `scale`/8 (rounded up).
inline int64_t jpeg_scaled_size(int64_t size, int scale) { return (size * scale + 7) / 8; }

/// A decoded part of a JPEG: u8 RGB rows of `width` pixels, row y holding the scaled image's
/// pixels (x0 .. x0 + width) of row y0 + y. It covers at least the plan's region (libjpeg widens
/// columns to whole MCUs).
struct JpegRegion {
  int full_width = 0, full_height = 0;      ///< the header's size
  int scale = 8;                            ///< as planned
  int scaled_width = 0, scaled_height = 0;  ///< the whole image at that scale
  int x0 = 0, y0 = 0, width = 0, height = 0;
};

/// Decodes part of the JPEG `bytes` (a whole file; `path` names it in errors) to RGB in `pixels`
/// (resized as needed, so a caller's buffer is reused; it may hold one row more than the region): reads the header, checks its size
/// against `max_pixels`, asks `plan(width, height)` what to decode, and decodes that region at
/// that scale. Every row's entropy-coded data is still read, so a truncated or corrupt file is
/// the same mpx::Error as with decode_jpeg. Only when have_jpeg_region_decode().
JpegRegion decode_jpeg_region(const std::vector<uint8_t>& bytes, const std::string& path, int64_t max_pixels,
                              const std::function<JpegPlan(int, int)>& plan, std::vector<uint8_t>& pixels);

/// True when this build links nvJPEG (cmake/nvjpeg.cmake) and the library answers: GPU JPEG
/// decoding (data/gpu_decode.h, ImageFolderOptions::gpu_decode) is available.
bool have_nvjpeg();

}  // namespace mpx::data
