// interpolate as one resampling pass per spatial dim (kernels, or index_select gathers); pixel_shuffle as a reshape-permute-reshape.
#include "ops/resize.h"

#include <algorithm>
#include <cmath>

#include "autograd/grad_mode.h"
#include "autograd/node.h"
#include "ops/dispatch.h"
#include "ops/elementwise.h"
#include "ops/index.h"
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

// x resampled along `dim` by the kernels: out[.., j, ..] = w[2j] x[.., idx[2j], ..] + w[2j + 1] x[.., idx[2j + 1], ..]
// (`adjoint`: the transposed map, n_out then being the input length). Differentiable: each direction's backward is
// the other.
Tensor resample(const Tensor& x, int64_t dim, const Tensor& idx, const Tensor& w, int64_t n_out, bool adjoint) {
  int64_t outer = 1, inner = 1;
  for (int64_t d = 0; d < dim; ++d) outer *= x.size(d);
  for (int64_t d = dim + 1; d < x.dim(); ++d) inner *= x.size(d);
  IntList shape = x.sizes();
  shape[static_cast<size_t>(dim)] = n_out;
  Tensor out = empty({outer, n_out, inner}, x.options());
  {
    NoGradGuard ng;
    const Tensor x3 = x.contiguous().view({outer, x.size(dim), inner});
    dispatch::kernel<kernels::ResampleFn>(adjoint ? OpId::resample_dim_backward : OpId::resample_dim, x.device(),
                                          x.dtype())(out, x3, idx, w);
  }
  out = out.view(shape);
  if (auto n = autograd::record("ResampleBackward", {x}, {out}, [](FunctionNode& self, const tensor_list& g) -> tensor_list {
        return {resample(g[0], self.shapes[0][0], self.saved(0), self.saved(1), self.shapes[0][1], self.scalars[0] == 0.0)};
      })) {
    n->save(idx);
    n->save(w);
    n->shapes = {{dim, x.size(dim)}};
    n->scalars = {adjoint ? 1.0 : 0.0};
  }
  return out;
}

// x resized along `dim` by nearest or linear sampling: each output position reads two input positions with
// weights (nearest: the second weight is 0). The kernels where the device has them, else two gathers.
template <typename M>
Tensor resize_dim(const Tensor& x, int64_t dim, const Axis<M>& ax, const std::string& mode, bool align_corners) {
  const size_t n = static_cast<size_t>(ax.out);
  std::vector<int64_t> idx(2 * n);
  std::vector<double> w(2 * n);
  const bool nearest = mode == "nearest" || mode == "nearest-exact";
  for (int64_t o = 0; o < ax.out; ++o) {
    const size_t k = 2 * static_cast<size_t>(o);
    if (nearest) {
      idx[k] = idx[k + 1] = ax.nearest(o, mode == "nearest-exact");
      w[k] = 1.0;
      w[k + 1] = 0.0;
      continue;
    }
    const M src = ax.linear_src(o, align_corners);
    const int64_t lo = std::min(static_cast<int64_t>(src), ax.in - 1);
    const M l1 = std::min(std::max(src - static_cast<M>(lo), M(0)), M(1));
    idx[k] = lo;
    idx[k + 1] = lo + (lo < ax.in - 1 ? 1 : 0);
    w[k] = static_cast<double>(M(1) - l1);
    w[k + 1] = static_cast<double>(l1);
  }
  const Tensor it = tensor(idx, {static_cast<int64_t>(2 * n)}), wt = tensor(w, {static_cast<int64_t>(2 * n)}).to(x.dtype());
  if (dispatch::has_kernel(OpId::resample_dim, x.device().type, x.dtype())) return resample(x, dim, it, wt, ax.out, false);
  // Elsewhere: gathers of the pairs' first and second positions, blended.
  const int64_t m = ax.out;
  const Tensor pi = it.view({m, 2}).to(x.device()), pw = wt.view({m, 2}).to(x.device());
  IntList wshape(static_cast<size_t>(x.dim()), 1);
  wshape[static_cast<size_t>(dim)] = m;
  const Tensor a = index_select(x, dim, pi.select(1, 0).contiguous());
  if (nearest) return a;
  const Tensor i1 = pi.select(1, 1).contiguous();
  const Tensor w0 = pw.select(1, 0).reshape(wshape), w1 = pw.select(1, 1).reshape(wshape);
  return a * w0 + index_select(x, dim, i1) * w1;
}

}  // namespace

Tensor interpolate(const Tensor& x0, const IntList& size, const std::vector<double>& scale_factor, const std::string& mode,
                   std::optional<bool> align_corners) {
  MPX_CHECK(x0.defined() && x0.dim() >= 3 && x0.dim() <= 5, "interpolate: input must be [N, C, W], [N, C, H, W] or "
            "[N, C, D, H, W], got ", x0.defined() ? ops::describe(x0) : "an undefined tensor");
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
  Tensor y = x;
  // The last dim first: its pass gathers single elements (the others move whole rows), so it runs on the smaller
  // intermediate when upsampling.
  for (int64_t k = sd - 1; k >= 0; --k) {
    const int64_t d = k + 2, in = x.size(d);
    std::optional<double> f;
    int64_t out;
    if (!size.empty()) {
      out = size[n == 1 ? 0 : static_cast<size_t>(k)];
    } else {
      f = scale_factor[n == 1 ? 0 : static_cast<size_t>(k)];
      MPX_CHECK(*f > 0 && std::isfinite(*f), "interpolate: scale factors must be positive, got ", *f);
      out = static_cast<int64_t>(std::floor(static_cast<double>(in) * *f));
    }
    MPX_CHECK(out > 0 && in > 0, "interpolate: spatial dim ", k, " would go from ", in, " to ", out,
              "; both must be positive");
    if (out == in && !f) continue;
    if (x.dtype() == kFloat64) y = resize_dim(y, d, Axis<double>::make(in, out, f, align_corners.value_or(false), linear),
                                              mode, align_corners.value_or(false));
    else y = resize_dim(y, d, Axis<float>::make(in, out, f, align_corners.value_or(false), linear), mode,
                        align_corners.value_or(false));
  }
  return y.is_same(x) ? x.clone() : y;
}

Tensor pixel_shuffle(const Tensor& x, int64_t r) {
  MPX_CHECK(r > 0, "pixel_shuffle: upscale_factor must be positive, got ", r);
  MPX_CHECK(x.defined() && x.dim() >= 3 && x.size(-3) % (r * r) == 0, "pixel_shuffle: input must be [..., C r^2, H, W] "
            "with r = ", r, ", got ", x.defined() ? ops::describe(x) : "an undefined tensor");
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
            "[..., C, H r, W r] with r = ", r, ", got ", x.defined() ? ops::describe(x) : "an undefined tensor");
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
