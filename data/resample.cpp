// Separable antialiased bilinear resampling into the loader's output layouts; the vertical pass
// runs first over whole rows (contiguous, vectorizes), the horizontal pass on the few output rows.
#include "data/resample.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/error.h"
#include "core/half.h"

namespace mpx::data {

AxisWeights aa_bilinear_weights(double start, double length, int64_t out, int64_t first_out, int64_t count_out,
                                int64_t clamp_lo, int64_t clamp_hi) {
  MPX_CHECK(out > 0 && length > 0 && count_out > 0 && first_out >= 0 && first_out + count_out <= out &&
                clamp_lo < clamp_hi,
            "aa_bilinear_weights: bad window (start ", start, ", length ", length, ", out ", out, ", outputs ",
            first_out, "+", count_out, ", clamp [", clamp_lo, ", ", clamp_hi, "))");
  const double scale = length / static_cast<double>(out);
  // The triangle filter's support is 1 input pixel, stretched by the factor when shrinking.
  const double support = scale >= 1.0 ? scale : 1.0;
  const double invscale = scale >= 1.0 ? 1.0 / scale : 1.0;
  AxisWeights a;
  a.out = count_out;
  a.taps = static_cast<int64_t>(std::ceil(support)) * 2 + 1;
  a.first.resize(static_cast<size_t>(count_out));
  a.count.resize(static_cast<size_t>(count_out));
  a.weights.assign(static_cast<size_t>(count_out * a.taps), 0.f);
  a.lo = clamp_hi;
  a.hi = clamp_lo;
  std::vector<double> w(static_cast<size_t>(a.taps));
  for (int64_t k = 0; k < count_out; ++k) {
    const double center = start + (static_cast<double>(first_out + k) + 0.5) * scale;
    const int64_t xmin = std::max(static_cast<int64_t>(std::floor(center - support + 0.5)), clamp_lo);
    const int64_t xmax = std::min(static_cast<int64_t>(std::floor(center + support + 0.5)), clamp_hi);
    int64_t n = std::min(xmax - xmin, a.taps);
    double total = 0;
    for (int64_t j = 0; j < n; ++j) {
      const double x = std::abs((static_cast<double>(xmin + j) - center + 0.5) * invscale);
      w[static_cast<size_t>(j)] = x < 1.0 ? 1.0 - x : 0.0;
      total += w[static_cast<size_t>(j)];
    }
    // A window entirely outside the clamp range (only from a degenerate box) takes the nearest pixel.
    int64_t first = xmin;
    if (n <= 0 || total <= 0) {
      first = std::clamp(static_cast<int64_t>(std::floor(center)), clamp_lo, clamp_hi - 1);
      n = 1;
      w[0] = total = 1.0;
    }
    a.first[static_cast<size_t>(k)] = static_cast<int32_t>(first);
    a.count[static_cast<size_t>(k)] = static_cast<int32_t>(n);
    for (int64_t j = 0; j < n; ++j)
      a.weights[static_cast<size_t>(k * a.taps + j)] = static_cast<float>(w[static_cast<size_t>(j)] / total);
    a.lo = std::min(a.lo, first);
    a.hi = std::max(a.hi, first + n);
  }
  return a;
}

namespace {
typedef float V4 __attribute__((vector_size(16)));
inline V4 load4(const float* p) {
  V4 v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

template <typename T, typename Cvt>
void store_row(const float* row, int64_t y, int64_t h, int64_t w, const ResampleOutput& o, T* out, Cvt cvt) {
  if (o.channels_last) {
    T* d = out + y * w * 3;
    for (int64_t x = 0; x < w; ++x)
      for (int c = 0; c < 3; ++c) d[x * 3 + c] = cvt(row[x * 3 + c] * o.mul[c] + o.add[c]);
    return;
  }
  for (int c = 0; c < 3; ++c) {
    T* d = out + (c * h + y) * w;
    for (int64_t x = 0; x < w; ++x) d[x] = cvt(row[x * 3 + c] * o.mul[c] + o.add[c]);
  }
}
}  // namespace

void resample_rgb(const uint8_t* src, int64_t src_stride, int64_t src_y0, int64_t src_x0, const AxisWeights& wy,
                  const AxisWeights& wx, const ResampleOutput& o, void* out, std::vector<float>& scratch) {
  MPX_CHECK(wy.lo >= src_y0 && wx.lo >= src_x0, "resample_rgb: the weights read outside the source region");
  const int64_t oh = wy.out, ow = wx.out;
  const int64_t cols = (wx.hi - wx.lo) * 3;
  scratch.resize(static_cast<size_t>(oh * cols + ow * 3));
  float* tmp = scratch.data();
  float* row = tmp + oh * cols;
  const uint8_t* base = src + (wx.lo - src_x0) * 3;
  for (int64_t y = 0; y < oh; ++y) {
    float* acc = tmp + y * cols;
    const float* w = &wy.weights[static_cast<size_t>(y * wy.taps)];
    const uint8_t* s0 = base + (wy.first[static_cast<size_t>(y)] - src_y0) * src_stride;
    const float w0 = w[0];
    for (int64_t t = 0; t < cols; ++t) acc[t] = w0 * static_cast<float>(s0[t]);
    for (int32_t k = 1; k < wy.count[static_cast<size_t>(y)]; ++k) {
      const uint8_t* s = s0 + k * src_stride;
      const float wk = w[k];
      for (int64_t t = 0; t < cols; ++t) acc[t] += wk * static_cast<float>(s[t]);
    }
  }
  const bool u8 = o.dtype == kUInt8;
  ResampleOutput plain = o;
  if (u8) {
    for (int c = 0; c < 3; ++c) plain.mul[c] = 1, plain.add[c] = 0;
  }
  for (int64_t y = 0; y < oh; ++y) {
    const float* acc = tmp + y * cols;
    for (int64_t x = 0; x < ow; ++x) {
      const float* w = &wx.weights[static_cast<size_t>(x * wx.taps)];
      const float* s = acc + (wx.first[static_cast<size_t>(x)] - wx.lo) * 3;
      // One 4-lane multiply-add per tap for the pixel's R, G, B (the 4th lane, the next pixel's
      // R or the row buffer after the last row, is read and dropped; scratch always has it).
      V4 sum = {0, 0, 0, 0};
      for (int32_t k = 0; k < wx.count[static_cast<size_t>(x)]; ++k) sum += w[k] * load4(s + k * 3);
      const int64_t xo = o.flip ? ow - 1 - x : x;
      row[xo * 3] = sum[0];
      row[xo * 3 + 1] = sum[1];
      row[xo * 3 + 2] = sum[2];
    }
    switch (o.dtype) {
      case kUInt8:
        store_row(row, y, oh, ow, plain, static_cast<uint8_t*>(out),
                  [](float v) { return static_cast<uint8_t>(std::clamp(std::nearbyint(v), 0.f, 255.f)); });
        break;
      case kFloat32: store_row(row, y, oh, ow, o, static_cast<float*>(out), [](float v) { return v; }); break;
      case kFloat16:
        store_row(row, y, oh, ow, o, static_cast<uint16_t*>(out), [](float v) { return detail::f32_to_f16_bits(v); });
        break;
      case kBFloat16:
        store_row(row, y, oh, ow, o, static_cast<uint16_t*>(out), [](float v) { return detail::f32_to_bf16_bits(v); });
        break;
      default: MPX_ERROR("resample_rgb: output dtype ", dtype_name(o.dtype), " is not u8, f32, f16 or bf16");
    }
  }
}

}  // namespace mpx::data
