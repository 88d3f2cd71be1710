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
  MPX_CHECK(out > 0 && length > 0 && count_out > 0 && clamp_lo < clamp_hi,
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
  bool padded = false;
  for (int64_t k = 0; k < count_out; ++k) {
    const int64_t i = first_out + k;
    if (i < 0 || i >= out) {  // padding: filled in below, once the pixels read are known
      padded = true;
      a.count[static_cast<size_t>(k)] = 0;
      continue;
    }
    const double center = start + (static_cast<double>(i) + 0.5) * scale;
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
  if (a.lo >= a.hi) a.lo = clamp_lo, a.hi = clamp_lo + 1;  // all padding
  // A padded output reads one pixel that is read anyway, with weight 0: every resampler (and the
  // region a JPEG is decoded over) then handles it like any other output, and it comes out 0.
  if (padded)
    for (int64_t k = 0; k < count_out; ++k)
      if (a.count[static_cast<size_t>(k)] == 0) {
        a.first[static_cast<size_t>(k)] = static_cast<int32_t>(a.lo);
        a.count[static_cast<size_t>(k)] = 1;
      }
  return a;
}

AxisWeights bilinear_weights(int64_t in, int64_t out) {
  MPX_CHECK(in > 0 && out > 0, "bilinear_weights: sizes must be positive, got ", in, " -> ", out);
  AxisWeights a;
  a.out = out;
  a.taps = 2;
  a.first.resize(static_cast<size_t>(out));
  a.count.resize(static_cast<size_t>(out));
  a.weights.assign(static_cast<size_t>(out * 2), 0.f);
  a.lo = 0;
  a.hi = in;
  const double scale = static_cast<double>(in) / static_cast<double>(out);
  for (int64_t d = 0; d < out; ++d) {
    const double s = std::max(0.0, scale * (static_cast<double>(d) + 0.5) - 0.5);
    const int64_t i0 = std::min(static_cast<int64_t>(s), in - 1);
    const auto l1 = static_cast<float>(s - static_cast<double>(i0));
    a.first[static_cast<size_t>(d)] = static_cast<int32_t>(i0);
    if (i0 < in - 1) {
      a.count[static_cast<size_t>(d)] = 2;
      a.weights[static_cast<size_t>(d * 2)] = 1 - l1;
      a.weights[static_cast<size_t>(d * 2 + 1)] = l1;
    } else {
      a.count[static_cast<size_t>(d)] = 1;
      a.weights[static_cast<size_t>(d * 2)] = 1;
    }
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
void store_row(const float* row, int ch, int64_t y, int64_t h, int64_t w, const ResampleOutput& o, T* out, Cvt cvt) {
  if (o.channels_last) {
    T* d = out + y * w * ch;
    for (int64_t x = 0; x < w; ++x)
      for (int c = 0; c < ch; ++c) d[x * ch + c] = cvt(row[x * ch + c] * o.mul[c] + o.add[c]);
    return;
  }
  if (ch == 1) {  // grey (MNIST): a unit stride the compiler vectorizes
    T* d = out + y * w;
    const float m = o.mul[0], a = o.add[0];
    for (int64_t x = 0; x < w; ++x) d[x] = cvt(row[x] * m + a);
    return;
  }
  for (int c = 0; c < ch; ++c) {
    T* d = out + (c * h + y) * w;
    for (int64_t x = 0; x < w; ++x) d[x] = cvt(row[x * ch + c] * o.mul[c] + o.add[c]);
  }
}

void store(const float* row, int ch, int64_t y, int64_t h, int64_t w, const ResampleOutput& o, void* out) {
  switch (o.dtype) {
    case kUInt8: {
      // u8 keeps 0..255 values: the multiply-add is for the float outputs only.
      ResampleOutput plain = o;
      for (int c = 0; c < 4; ++c) plain.mul[c] = 1, plain.add[c] = 0;
      store_row(row, ch, y, h, w, plain, static_cast<uint8_t*>(out),
                [](float v) { return static_cast<uint8_t>(std::clamp(std::nearbyint(v), 0.f, 255.f)); });
      break;
    }
    case kFloat32: store_row(row, ch, y, h, w, o, static_cast<float*>(out), [](float v) { return v; }); break;
    case kFloat16:
      store_row(row, ch, y, h, w, o, static_cast<uint16_t*>(out), [](float v) { return detail::f32_to_f16_bits(v); });
      break;
    case kBFloat16:
      store_row(row, ch, y, h, w, o, static_cast<uint16_t*>(out), [](float v) { return detail::f32_to_bf16_bits(v); });
      break;
    default: MPX_ERROR("resample: output dtype ", dtype_name(o.dtype), " is not u8, f32, f16 or bf16");
  }
}
}  // namespace

void resample_rgb(const uint8_t* src, int64_t src_stride, int64_t src_y0, int64_t src_x0, const AxisWeights& wy,
                  const AxisWeights& wx, const ResampleOutput& o, void* out, std::vector<float>& scratch) {
  resample_u8(src, src_stride, 3, src_y0, src_x0, wy, wx, o, out, scratch);
}

void resample_u8(const uint8_t* src, int64_t src_stride, int ch, int64_t src_y0, int64_t src_x0,
                 const AxisWeights& wy, const AxisWeights& wx, const ResampleOutput& o, void* out,
                 std::vector<float>& scratch) {
  MPX_CHECK(ch >= 1 && ch <= 4, "resample: 1 to 4 channels, got ", ch);
  MPX_CHECK(wy.lo >= src_y0 && wx.lo >= src_x0, "resample: the weights read outside the source region");
  const int64_t oh = wy.out, ow = wx.out;
  const int64_t cols = (wx.hi - wx.lo) * ch;
  scratch.resize(static_cast<size_t>(oh * cols + ow * ch + 4));
  float* tmp = scratch.data();
  float* row = tmp + oh * cols;
  const uint8_t* base = src + (wx.lo - src_x0) * ch;
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
  for (int64_t y = 0; y < oh; ++y) {
    const float* acc = tmp + y * cols;
    for (int64_t x = 0; x < ow; ++x) {
      const float* w = &wx.weights[static_cast<size_t>(x * wx.taps)];
      const float* s = acc + (wx.first[static_cast<size_t>(x)] - wx.lo) * ch;
      const int64_t xo = o.flip ? ow - 1 - x : x;
      const int32_t n = wx.count[static_cast<size_t>(x)];
      if (ch == 3) {
        // One 4-lane multiply-add per tap for the pixel's R, G, B (the 4th lane, the next pixel's
        // R or the row buffer after the last row, is read and dropped; scratch always has it).
        V4 sum = {0, 0, 0, 0};
        for (int32_t k = 0; k < n; ++k) sum += w[k] * load4(s + k * 3);
        row[xo * 3] = sum[0];
        row[xo * 3 + 1] = sum[1];
        row[xo * 3 + 2] = sum[2];
      } else {
        for (int c = 0; c < ch; ++c) {
          float sum = 0;
          for (int32_t k = 0; k < n; ++k) sum += w[k] * s[k * ch + c];
          row[xo * ch + c] = sum;
        }
      }
    }
    store(row, ch, y, oh, ow, o, out);
  }
}

void copy_window_u8(const uint8_t* src, int64_t src_stride, int ch, int64_t src_y0, int64_t src_x0,
                    int64_t height, int64_t width, int64_t top, int64_t left, int64_t out_h, int64_t out_w,
                    const ResampleOutput& o, void* out, std::vector<float>& scratch) {
  MPX_CHECK(ch >= 1 && ch <= 4, "resample: 1 to 4 channels, got ", ch);
  scratch.assign(static_cast<size_t>(out_w * ch), 0.f);
  float* row = scratch.data();
  // The columns of the window inside the image; the rest stay 0 in every row.
  const int64_t x0 = std::clamp<int64_t>(-left, 0, out_w), x1 = std::clamp<int64_t>(width - left, x0, out_w);
  // Every row writes the same span of `row` (mirrored when flipping), so what lies outside it stays 0.
  const int64_t n = (x1 - x0) * ch;
  float* span = row + (o.flip ? out_w - x1 : x0) * ch;
  for (int64_t y = 0; y < out_h; ++y) {
    const int64_t iy = top + y;
    if (iy < 0 || iy >= height) {
      std::fill(span, span + n, 0.f);
    } else {
      const uint8_t* line = src + (iy - src_y0) * src_stride + (left - src_x0) * ch;
      if (!o.flip) {
        const uint8_t* s = line + x0 * ch;
        for (int64_t k = 0; k < n; ++k) span[k] = static_cast<float>(s[k]);
      } else {
        for (int64_t x = x0; x < x1; ++x)
          for (int c = 0; c < ch; ++c) row[(out_w - 1 - x) * ch + c] = static_cast<float>(line[x * ch + c]);
      }
    }
    store(row, ch, y, out_h, out_w, o, out);
  }
}

void resample_planar(const float* src, int64_t channels, int64_t h, int64_t w, const AxisWeights& wy,
                     const AxisWeights& wx, float* out, std::vector<float>& scratch) {
  MPX_CHECK(wy.lo >= 0 && wy.hi <= h && wx.lo >= 0 && wx.hi <= w, "resample: the weights read outside the image");
  const int64_t oh = wy.out, ow = wx.out, cols = wx.hi - wx.lo;
  scratch.resize(static_cast<size_t>(oh * cols));
  for (int64_t c = 0; c < channels; ++c) {
    const float* plane = src + c * h * w + wx.lo;
    for (int64_t y = 0; y < oh; ++y) {
      float* acc = scratch.data() + y * cols;
      const float* wt = &wy.weights[static_cast<size_t>(y * wy.taps)];
      const float* s0 = plane + wy.first[static_cast<size_t>(y)] * w;
      for (int64_t t = 0; t < cols; ++t) acc[t] = wt[0] * s0[t];
      for (int32_t k = 1; k < wy.count[static_cast<size_t>(y)]; ++k)
        for (int64_t t = 0; t < cols; ++t) acc[t] += wt[k] * s0[k * w + t];
    }
    float* dst = out + c * oh * ow;
    for (int64_t y = 0; y < oh; ++y) {
      const float* acc = scratch.data() + y * cols;
      for (int64_t x = 0; x < ow; ++x) {
        const float* wt = &wx.weights[static_cast<size_t>(x * wx.taps)];
        const float* s = acc + (wx.first[static_cast<size_t>(x)] - wx.lo);
        float sum = 0;
        for (int32_t k = 0; k < wx.count[static_cast<size_t>(x)]; ++k) sum += wt[k] * s[k];
        dst[y * ow + x] = sum;
      }
    }
  }
}

}  // namespace mpx::data
