// ResampleBatch: the host side of GPU decoding's resample (weight tables in one buffer) and a host run of the kernel's arithmetic.
#include "data/resample_batch.h"

#include <cstring>
#include <limits>

#include "core/error.h"

namespace mpx::data {

ResampleBatch::ResampleBatch(int64_t out_h, int64_t out_w) : out_h_(out_h), out_w_(out_w) {
  MPX_CHECK(out_h > 0 && out_w > 0, "ResampleBatch: the output must be non-empty, got ", out_h, "x", out_w);
}

void ResampleBatch::add(const AxisWeights& wy, const AxisWeights& wx, int64_t src, int64_t pitch, int64_t sample,
                        bool flip) {
  MPX_CHECK(wy.out == out_h_ && wx.out == out_w_, "ResampleBatch: weights for ", wy.out, "x", wx.out,
            " outputs in a batch of ", out_h_, "x", out_w_);
  MPX_CHECK(wx.hi * 3 <= pitch && src >= 0 && sample >= 0, "ResampleBatch: the weights read past the image row (",
            wx.hi, " pixels, ", pitch, " bytes per row)");
  // The kernel indexes the tables with int32: plenty for any batch (a 224 x 224 output of a
  // 100-megapixel image needs about 10^5 weights), but checked rather than assumed.
  constexpr auto kMax = static_cast<size_t>(std::numeric_limits<int32_t>::max());
  MPX_CHECK(ints_.size() + 2 * static_cast<size_t>(out_h_ + out_w_) < kMax &&
                weights_.size() + wy.weights.size() + wx.weights.size() < kMax && pitch < static_cast<int64_t>(kMax) &&
                sample < static_cast<int64_t>(kMax),
            "ResampleBatch: the batch's weight tables exceed 2^31 entries; use a smaller batch");
  ResampleJob j;
  j.src = src;
  j.pitch = static_cast<int32_t>(pitch);
  j.sample = static_cast<int32_t>(sample);
  j.flip = flip ? 1 : 0;
  j.taps_y = static_cast<int32_t>(wy.taps);
  j.taps_x = static_cast<int32_t>(wx.taps);
  j.rows = static_cast<int32_t>(ints_.size());
  ints_.insert(ints_.end(), wy.first.begin(), wy.first.end());
  ints_.insert(ints_.end(), wy.count.begin(), wy.count.end());
  j.cols = static_cast<int32_t>(ints_.size());
  ints_.insert(ints_.end(), wx.first.begin(), wx.first.end());
  ints_.insert(ints_.end(), wx.count.begin(), wx.count.end());
  j.wrows = static_cast<int32_t>(weights_.size());
  weights_.insert(weights_.end(), wy.weights.begin(), wy.weights.end());
  j.wcols = static_cast<int32_t>(weights_.size());
  weights_.insert(weights_.end(), wx.weights.begin(), wx.weights.end());
  jobs_.push_back(j);
}

ResampleBatch::Packed ResampleBatch::pack() const {
  auto align = [](size_t n) { return (n + 15) / 16 * 16; };
  Packed p;
  const size_t jobs = jobs_.size() * sizeof(ResampleJob);
  p.ints_at = align(jobs);
  p.weights_at = align(p.ints_at + ints_.size() * sizeof(int32_t));
  p.bytes.assign(p.weights_at + weights_.size() * sizeof(float), 0);
  if (jobs) std::memcpy(p.bytes.data(), jobs_.data(), jobs);
  if (!ints_.empty()) std::memcpy(p.bytes.data() + p.ints_at, ints_.data(), ints_.size() * sizeof(int32_t));
  if (!weights_.empty()) std::memcpy(p.bytes.data() + p.weights_at, weights_.data(), weights_.size() * sizeof(float));
  return p;
}

void resample_batch_host(const ResampleBatch& b, const uint8_t* pixels, const ResampleOutput& o, int64_t batch_size,
                         void* out) {
  MPX_CHECK(o.dtype == kUInt8 || o.dtype == kFloat32, "resample_batch_host: u8 or f32 output, got ",
            dtype_name(o.dtype));
  const auto h = static_cast<int32_t>(b.out_h()), w = static_cast<int32_t>(b.out_w());
  for (const ResampleJob& j : b.jobs()) {
    MPX_CHECK(j.sample < batch_size, "resample_batch_host: job for sample ", j.sample, " of ", batch_size);
    for (int32_t y = 0; y < h; ++y)
      for (int32_t xo = 0; xo < w; ++xo) {
        float v[3];
        resample_pixel(j, b.ints().data(), b.weights().data(), pixels, h, w, y, j.flip ? w - 1 - xo : xo, v);
        for (int c = 0; c < 3; ++c) {
          const int64_t at = resample_out_index(o.channels_last, h, w, j.sample, c, y, xo);
          if (o.dtype == kUInt8) static_cast<uint8_t*>(out)[at] = static_cast<uint8_t>(resample_to_u8(v[c]));
          else static_cast<float*>(out)[at] = v[c] * o.mul[c] + o.add[c];
        }
      }
  }
}

}  // namespace mpx::data
