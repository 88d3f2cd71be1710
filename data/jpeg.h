// JPEG decoding through libjpeg-turbo (when the build found it; stb_image is the fallback).
#pragma once
#include <cstdio>
#include <string>

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

}  // namespace mpx::data
