// Antialiased bilinear resampling (torchvision >= 0.13 with antialias=True, PIL's BILINEAR) from
// a u8 RGB crop straight to the normalized output: resize, flip, scale, normalize, cast and
// layout in one pass, with per-axis weights computed once per image.
#pragma once
#include <cstdint>
#include <vector>

#include "core/dtype.h"

namespace mpx::data {

/// The taps of one output axis: output i reads `count[i]` input pixels from `first[i]` on,
/// weighted by weights[i * taps ...] (summing to 1).
struct AxisWeights {
  int64_t out = 0, taps = 0;
  std::vector<int32_t> first, count;
  std::vector<float> weights;
  /// The input pixels any output reads: [lo, hi).
  int64_t lo = 0, hi = 0;
};

/// The weights for resampling the window [start, start + length) of an input axis (fractional
/// bounds allowed: a window mapped into a reduced-size decode) onto `out` samples, of which
/// outputs [first_out, first_out + count_out) are kept (an eval centre crop of a resize).
/// Taps are clamped to input pixels [clamp_lo, clamp_hi), as torchvision clamps to the crop.
/// This is PIL's / torchvision's `_upsample_bilinear2d_aa` triangle filter: support widens
/// with the downscale factor, so shrinking averages every input pixel instead of skipping some.
AxisWeights aa_bilinear_weights(double start, double length, int64_t out, int64_t first_out, int64_t count_out,
                                int64_t clamp_lo, int64_t clamp_hi);

/// How the resampled values are written: element type (u8 keeps 0..255 values, rounded, for a
/// device-side normalize; f32/f16/bf16 store v * mul[c] + add[c] for v in 0..255), layout
/// ([C,H,W], or [H,W,C] when channels_last), and a left-right mirror.
struct ResampleOutput {
  DType dtype = kFloat32;
  bool channels_last = false;
  bool flip = false;
  float mul[3] = {1, 1, 1}, add[3] = {0, 0, 0};
};

/// Resamples u8 RGB pixels (`src`: rows of `src_stride` bytes, whose first pixel is input pixel
/// (src_y0, src_x0)) with `wy` and `wx` into `out` (wy.out x wx.out x 3 elements of
/// `o.dtype`). `scratch` is reused between calls so a worker allocates nothing per image.
void resample_rgb(const uint8_t* src, int64_t src_stride, int64_t src_y0, int64_t src_x0, const AxisWeights& wy,
                  const AxisWeights& wx, const ResampleOutput& o, void* out, std::vector<float>& scratch);

}  // namespace mpx::data
