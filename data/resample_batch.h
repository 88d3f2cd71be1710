// The batched resample behind GPU JPEG decoding: per-sample weight tables packed for one copy to the device, and the per-pixel arithmetic the CUDA kernel and its host reference share.
#pragma once
#include <math.h>

#include <cstddef>
#include <cstdint>
#include <vector>

#include "core/hd.h"
#include "data/resample.h"

namespace mpx::data {

/// One image of a batched resample: where its decoded pixels and its weight tables are.
struct ResampleJob {
  int64_t src = 0;             ///< byte offset of the image (u8 RGB rows of `pitch` bytes) in the pixel buffer
  int32_t pitch = 0;           ///< bytes per row of the image
  int32_t sample = 0;          ///< the output sample it fills
  int32_t flip = 0;            ///< mirror left-right
  int32_t taps_y = 0, taps_x = 0;
  int32_t rows = 0, cols = 0;  ///< index in the int table of the rows' (columns') first taps; their counts follow, one axis further
  int32_t wrows = 0, wcols = 0;  ///< index in the weight table of the rows' (columns') weights
};

/// The host side of a batched resample of images decoded at full size: each image's two
/// AxisWeights (the CPU path's, ImagePipeline::weights at scale 8) in flat tables.
class ResampleBatch {
 public:
  /// Every output is out_h x out_w.
  ResampleBatch(int64_t out_h, int64_t out_w);
  /// Adds the image at byte `src` of the pixel buffer (rows of `pitch` bytes) resampled with
  /// `wy` and `wx` (full-image pixel indices) into output sample `sample`, mirrored when `flip`.
  void add(const AxisWeights& wy, const AxisWeights& wx, int64_t src, int64_t pitch, int64_t sample, bool flip);
  size_t size() const { return jobs_.size(); }
  int64_t out_h() const { return out_h_; }
  int64_t out_w() const { return out_w_; }
  const std::vector<ResampleJob>& jobs() const { return jobs_; }
  const std::vector<int32_t>& ints() const { return ints_; }
  const std::vector<float>& weights() const { return weights_; }

  /// Jobs, int table and weight table in one buffer (each part 16-byte aligned), for a single
  /// host-to-device copy; the jobs start at byte 0.
  struct Packed {
    std::vector<uint8_t> bytes;
    size_t ints_at = 0, weights_at = 0;
  };
  Packed pack() const;

 private:
  int64_t out_h_, out_w_;
  std::vector<ResampleJob> jobs_;
  std::vector<int32_t> ints_;
  std::vector<float> weights_;
};

/// Element (sample b, channel c, row y, column x) of a [N,3,H,W] or [N,H,W,3] batch.
MPX_HD inline int64_t resample_out_index(bool channels_last, int64_t h, int64_t w, int64_t b, int64_t c, int64_t y,
                                         int64_t x) {
  return channels_last ? ((b * h + y) * w + x) * 3 + c : ((b * 3 + c) * h + y) * w + x;
}

/// R, G, B of output pixel (y, x) of job `j` before the flip (x counts in the source's
/// direction). The sums run in the CPU path's order (resample_rgb: each column's taps down the
/// rows first, then across the columns), so the two differ only by rounding of the f32 sums.
MPX_HD inline void resample_pixel(const ResampleJob& j, const int32_t* ints, const float* weights,
                                  const uint8_t* pixels, int32_t out_h, int32_t out_w, int32_t y, int32_t x,
                                  float v[3]) {
  const uint8_t* img = pixels + j.src;
  const int32_t fy = ints[j.rows + y], ny = ints[j.rows + out_h + y];
  const int32_t fx = ints[j.cols + x], nx = ints[j.cols + out_w + x];
  const float* wy = weights + j.wrows + static_cast<int64_t>(y) * j.taps_y;
  const float* wx = weights + j.wcols + static_cast<int64_t>(x) * j.taps_x;
  v[0] = v[1] = v[2] = 0.f;
  for (int32_t a = 0; a < nx; ++a) {
    const uint8_t* p = img + static_cast<int64_t>(fy) * j.pitch + static_cast<int64_t>(fx + a) * 3;
    float c0 = wy[0] * static_cast<float>(p[0]), c1 = wy[0] * static_cast<float>(p[1]),
          c2 = wy[0] * static_cast<float>(p[2]);
    for (int32_t k = 1; k < ny; ++k) {
      const uint8_t* q = p + static_cast<int64_t>(k) * j.pitch;
      c0 += wy[k] * static_cast<float>(q[0]);
      c1 += wy[k] * static_cast<float>(q[1]);
      c2 += wy[k] * static_cast<float>(q[2]);
    }
    v[0] += wx[a] * c0;
    v[1] += wx[a] * c1;
    v[2] += wx[a] * c2;
  }
}

/// A resampled value as u8: rounded half to even and clamped, as resample_rgb stores it.
MPX_HD inline float resample_to_u8(float v) { return fminf(fmaxf(rintf(v), 0.f), 255.f); }

/// The batch as the CUDA kernel computes it, pixel by pixel on the host: `out` holds
/// batch_size samples of the output (o.dtype u8 or f32; o.flip is ignored, each job has its own).
/// The reference the kernel's indexing is tested against without a GPU.
void resample_batch_host(const ResampleBatch& b, const uint8_t* pixels, const ResampleOutput& o, int64_t batch_size,
                         void* out);

/// Launches the batched resample on `stream` (a cudaStream_t): one thread per output pixel of
/// every job, writing [batch, ...] elements of o.dtype (u8, f32, f16, bf16) at `out` (device
/// memory). `table` is ResampleBatch::pack()'s buffer on the device; `pixels` the decoded images.
/// CUDA builds only.
void launch_resample_batch(const uint8_t* table, size_t ints_at, size_t weights_at, int64_t jobs, int64_t out_h,
                           int64_t out_w, const uint8_t* pixels, const ResampleOutput& o, void* out, void* stream);

}  // namespace mpx::data
