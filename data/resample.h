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
/// Kept outputs outside [0, out) are zero padding (a centre or random crop larger than the
/// image, as torchvision pads): one tap of weight 0 on a pixel the others read anyway.
/// Taps are clamped to input pixels [clamp_lo, clamp_hi), as torchvision clamps to the crop.
/// This is PIL's / torchvision's `_upsample_bilinear2d_aa` triangle filter: support widens
/// with the downscale factor, so shrinking averages every input pixel instead of skipping some.
AxisWeights aa_bilinear_weights(double start, double length, int64_t out, int64_t first_out, int64_t count_out,
                                int64_t clamp_lo, int64_t clamp_hi);

/// Plain bilinear weights (antialias off: the two nearest pixels, half-pixel centres, clamped at
/// the edges, as torch.nn.functional.interpolate(align_corners=False)) from `in` pixels to `out`.
AxisWeights bilinear_weights(int64_t in, int64_t out);

/// How the resampled values are written: element type (u8 keeps 0..255 values, rounded, for a
/// device-side normalize; f32/f16/bf16 store v * mul[c] + add[c] for v in 0..255), layout
/// ([C,H,W], or [H,W,C] when channels_last), and a left-right mirror.
struct ResampleOutput {
  DType dtype = kFloat32;
  bool channels_last = false;
  bool flip = false;
  float mul[4] = {1, 1, 1, 1}, add[4] = {0, 0, 0, 0};  // per channel
};

/// Resamples u8 RGB pixels (`src`: rows of `src_stride` bytes, whose first pixel is input pixel
/// (src_y0, src_x0)) with `wy` and `wx` into `out` (wy.out x wx.out x 3 elements of
/// `o.dtype`). `scratch` is reused between calls so a worker allocates nothing per image.
void resample_rgb(const uint8_t* src, int64_t src_stride, int64_t src_y0, int64_t src_x0, const AxisWeights& wy,
                  const AxisWeights& wx, const ResampleOutput& o, void* out, std::vector<float>& scratch);
/// resample_rgb for u8 pixels of 1 to 4 interleaved channels.
void resample_u8(const uint8_t* src, int64_t src_stride, int channels, int64_t src_y0, int64_t src_x0,
                 const AxisWeights& wy, const AxisWeights& wx, const ResampleOutput& o, void* out,
                 std::vector<float>& scratch);
/// The identity-scale case of resample_u8 (a crop, zero-padded where it leaves the image, no
/// resize): output (y, x) is input pixel (top + y, left + x) of an image of height x width, 0
/// outside it; `src` is as for resample_u8. The values resample_u8 gives with identity weights,
/// without the arithmetic (CIFAR's RandomCrop, a CenterCrop alone).
void copy_window_u8(const uint8_t* src, int64_t src_stride, int channels, int64_t src_y0, int64_t src_x0,
                    int64_t height, int64_t width, int64_t top, int64_t left, int64_t out_h, int64_t out_w,
                    const ResampleOutput& o, void* out, std::vector<float>& scratch);
/// Resamples `channels` planes of f32 pixels (`h` x `w`, contiguous) with `wy` and `wx` (input
/// indices from 0) into `out`: channels planes of wy.out x wx.out.
void resample_planar(const float* src, int64_t channels, int64_t h, int64_t w, const AxisWeights& wy,
                     const AxisWeights& wx, float* out, std::vector<float>& scratch);

}  // namespace mpx::data
