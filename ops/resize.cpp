// interpolate as resampling passes over the last two dims (and the depth); pixel_shuffle as a reshape-permute-reshape.
#include "ops/resize.h"

#include <algorithm>
#include <cmath>

#include "autograd/grad_mode.h"
#include "autograd/node.h"
#include "ops/dispatch.h"
#include "ops/op_utils.h"

namespace mpx {
namespace {
using autograd::FunctionNode;

// PyTorch computes source coordinates in the op's math type (f32, f64 for f64 data): so do we, so that a
// coordinate on a pixel boundary rounds the same way.
template <typename M>
struct Axis {
  int64_t in, out;
  M scale;  // output-to-input coordinate factor

  static Axis make(int64_t in, int64_t out, std::optional<double> factor, bool align_corners, bool linear) {
    M s;
    if (linear && align_corners) s = out > 1 ? static_cast<M>(in - 1) / static_cast<M>(out - 1) : M(0);
    else if (factor) s = static_cast<M>(1.0 / *factor);
    else s = static_cast<M>(in) / static_cast<M>(out);
    return Axis{in, out, s};
  }
  int64_t nearest(int64_t dst, bool exact) const {
    const M src = exact ? (static_cast<M>(dst) + M(0.5)) * scale : static_cast<M>(dst) * scale;
    return std::min(static_cast<int64_t>(std::floor(src)), in - 1);
  }
  M linear_src(int64_t dst, bool align_corners) const {
    if (align_corners) return static_cast<M>(dst) * scale;
    const M s = scale * (static_cast<M>(dst) + M(0.5)) - M(0.5);
    return s < 0 ? M(0) : s;
  }
};

// One axis of a resampling pass: positions and weights as the kernels read them (ops/resize.h); undefined both
// when the axis is kept, w undefined for nearest.
struct AxisMap {
  Tensor i, w;
  int64_t in = 1, out = 1;
};

// The kernels' pass over x [outer, Hi, Wi] -> [outer, Ho, Wo] (`adjoint`: its transpose, [outer, Ho, Wo] ->
// [outer, Hi, Wi]). Differentiable: each direction's backward is the other.
Tensor resample(const Tensor& x, const AxisMap& h, const AxisMap& w, bool adjoint) {
  const int64_t ho = adjoint ? h.in : h.out, wo = adjoint ? w.in : w.out;
  Tensor out = empty({x.size(0), ho, wo}, x.options());
  {
    NoGradGuard ng;
    dispatch::kernel<kernels::ResampleFn>(adjoint ? OpId::resample_backward : OpId::resample, x.device(), x.dtype())(
        out, x.contiguous(), h.i, h.w, w.i, w.w);
  }
  if (auto n = autograd::record("ResampleBackward", {x}, {out}, [](FunctionNode& self, const tensor_list& g) -> tensor_list {
        const IntList& s = self.shapes[0];
        const AxisMap hm{self.saved(0), self.saved(1), s[0], s[1]}, wm{self.saved(2), self.saved(3), s[2], s[3]};
        return {resample(g[0], hm, wm, self.scalars[0] == 0.0)};
      })) {
    for (const Tensor* t : {&h.i, &h.w, &w.i, &w.w}) n->save(*t);
    n->shapes = {{h.in, h.out, w.in, w.out}};
    n->scalars = {adjoint ? 1.0 : 0.0};
  }
  return out;
}

// The map of one axis resized by nearest or linear sampling (on `dev`, weights in the math type M).
template <typename M>
AxisMap axis_map(const Axis<M>& ax, const std::string& mode, bool align_corners, Device dev) {
  const size_t n = static_cast<size_t>(ax.out);
  std::vector<int64_t> idx(2 * n);
  std::vector<M> w(2 * n);
  const bool nearest = mode == "nearest" || mode == "nearest-exact";
  for (int64_t o = 0; o < ax.out; ++o) {
    const size_t k = 2 * static_cast<size_t>(o);
    if (nearest) {
      idx[k] = idx[k + 1] = ax.nearest(o, mode == "nearest-exact");
      continue;
    }
    const M src = ax.linear_src(o, align_corners);
    const int64_t lo = std::min(static_cast<int64_t>(src), ax.in - 1);
    const M l1 = std::min(std::max(src - static_cast<M>(lo), M(0)), M(1));
    idx[k] = lo;
    idx[k + 1] = lo + (lo < ax.in - 1 ? 1 : 0);
    w[k] = M(1) - l1;
    w[k + 1] = l1;
  }
  AxisMap m{tensor(idx, {static_cast<int64_t>(2 * n)}).to(dev), {}, ax.in, ax.out};
  if (!nearest) m.w = tensor(w, {static_cast<int64_t>(2 * n)}).to(dev);
  return m;
}

// x [lead..., spatial...] viewed as [outer, Hi, Wi] and resampled.
Tensor resample_dims(const Tensor& x, const AxisMap& h, const AxisMap& w) {
  if (!h.i.defined() && !w.i.defined()) return x;
  const int64_t outer = x.numel() / std::max<int64_t>(h.in * w.in, 1);
  return resample(x.contiguous().view({outer, h.in, w.in}), h, w, false);
}

}  // namespace

Tensor interpolate(const Tensor& x0, const IntList& size, const std::vector<double>& scale_factor, const std::string& mode,
                   std::optional<bool> align_corners) {
  MPX_CHECK(x0.defined() && x0.dim() >= 3 && x0.dim() <= 5, "interpolate: input must be [N, C, W], [N, C, H, W] or "
            "[N, C, D, H, W], got ", ops::describe(x0));
  MPX_CHECK(is_floating(x0.dtype()), "interpolate: input must be floating, got ", ops::describe(x0));
  const int64_t sd = x0.dim() - 2;
  const bool linear = mode == "linear" || mode == "bilinear" || mode == "trilinear";
  MPX_CHECK(linear || mode == "nearest" || mode == "nearest-exact", "interpolate: unknown mode \"", mode,
            "\"; use \"nearest\", \"nearest-exact\", \"linear\", \"bilinear\" or \"trilinear\"");
  const int64_t want = mode == "linear" ? 1 : mode == "bilinear" ? 2 : mode == "trilinear" ? 3 : sd;
  MPX_CHECK(want == sd, "interpolate: mode \"", mode, "\" needs ", want + 2, "-d input, got ", ops::describe(x0));
  MPX_CHECK(!align_corners || linear, "interpolate: align_corners only applies to the linear modes, not \"", mode, "\"");
  MPX_CHECK(size.empty() != scale_factor.empty(), "interpolate: give either size or scale_factor (exactly one)");
  const size_t n = size.empty() ? scale_factor.size() : size.size();
  MPX_CHECK(n == 1 || n == static_cast<size_t>(sd), "interpolate: ", n, " sizes or factors for ", sd,
            " spatial dims; give one, or one per dim");
  const Tensor x = ops::autocast(OpId::interpolate, {x0})[0];
  const bool ac = align_corners.value_or(false);
  std::vector<AxisMap> maps(static_cast<size_t>(sd));
  bool any = false;
  for (int64_t k = 0; k < sd; ++k) {
    const int64_t in = x.size(k + 2);
    std::optional<double> f;
    int64_t out;
    if (!size.empty()) {
      out = size[n == 1 ? 0 : static_cast<size_t>(k)];
    } else {
      f = scale_factor[n == 1 ? 0 : static_cast<size_t>(k)];
      MPX_CHECK(*f > 0 && std::isfinite(*f), "interpolate: scale factors must be positive, got ", *f);
      const double o = std::floor(static_cast<double>(in) * *f);
      MPX_CHECK(o < 4611686018427387904.0, "interpolate: scale factor ", *f, " takes spatial dim ", k, " from ", in,
                " to ", o, " elements, more than any tensor holds");
      out = static_cast<int64_t>(o);
    }
    MPX_CHECK(out > 0 && in > 0, "interpolate: spatial dim ", k, " would go from ", in, " to ", out,
              "; both must be positive");
    AxisMap& m = maps[static_cast<size_t>(k)];
    m.in = m.out = in;
    if (out == in && !f) continue;  // kept: PyTorch's scale is then exactly 1 too
    any = true;
    m = x.dtype() == kFloat64 ? axis_map(Axis<double>::make(in, out, f, ac, linear), mode, ac, x.device())
                              : axis_map(Axis<float>::make(in, out, f, ac, linear), mode, ac, x.device());
  }
  if (!any) return x.is_same(x0) ? x.clone() : x;
  IntList shape = x.sizes();
  for (int64_t k = 0; k < sd; ++k) shape[static_cast<size_t>(k + 2)] = maps[static_cast<size_t>(k)].out;
  const AxisMap& wm = maps[static_cast<size_t>(sd - 1)];
  if (sd == 1) return resample_dims(x, AxisMap{}, wm).view(shape);
  const AxisMap& hm = maps[static_cast<size_t>(sd - 2)];
  if (sd == 2) return resample_dims(x, hm, wm).view(shape);
  // 5-d: the depth as the H of a pass over whole H x W planes, before the plane pass when it shrinks, else after.
  const AxisMap& dm = maps[0];
  const int64_t plane_in = hm.in * wm.in, plane_out = hm.out * wm.out;
  if (dm.out < dm.in) return resample_dims(resample_dims(x, dm, AxisMap{{}, {}, plane_in, plane_in}), hm, wm).view(shape);
  return resample_dims(resample_dims(x, hm, wm), dm, AxisMap{{}, {}, plane_out, plane_out}).view(shape);
}

Tensor pixel_shuffle(const Tensor& x, int64_t r) {
  MPX_CHECK(r > 0, "pixel_shuffle: upscale_factor must be positive, got ", r);
  MPX_CHECK(x.defined() && x.dim() >= 3 && x.size(-3) % (r * r) == 0, "pixel_shuffle: input must be [..., C r^2, H, W] "
            "with r = ", r, ", got ", ops::describe(x));
  const int64_t c = x.size(-3) / (r * r), h = x.size(-2), w = x.size(-1), lead = x.dim() - 3;
  IntList batch(x.sizes().begin(), x.sizes().begin() + lead);
  IntList s = batch, perm, out = batch;
  s.insert(s.end(), {c, r, r, h, w});
  for (int64_t i = 0; i < lead; ++i) perm.push_back(i);
  perm.insert(perm.end(), {lead, lead + 3, lead + 1, lead + 4, lead + 2});
  out.insert(out.end(), {c, h * r, w * r});
  return x.reshape(s).permute(perm).reshape(out);
}

Tensor pixel_unshuffle(const Tensor& x, int64_t r) {
  MPX_CHECK(r > 0, "pixel_unshuffle: downscale_factor must be positive, got ", r);
  MPX_CHECK(x.defined() && x.dim() >= 3 && x.size(-2) % r == 0 && x.size(-1) % r == 0, "pixel_unshuffle: input must be "
            "[..., C, H r, W r] with r = ", r, ", got ", ops::describe(x));
  const int64_t c = x.size(-3), h = x.size(-2) / r, w = x.size(-1) / r, lead = x.dim() - 3;
  IntList batch(x.sizes().begin(), x.sizes().begin() + lead);
  IntList s = batch, perm, out = batch;
  s.insert(s.end(), {c, h, r, w, r});
  for (int64_t i = 0; i < lead; ++i) perm.push_back(i);
  perm.insert(perm.end(), {lead, lead + 2, lead + 4, lead + 1, lead + 3});
  out.insert(out.end(), {c * r * r, h, w});
  return x.reshape(s).permute(perm).reshape(out);
}

}  // namespace mpx
