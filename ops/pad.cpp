// Padding ops (ops/pad.h): every mode as one gather over the last three dims through per-axis maps (ops/pad_map.h);
// constant padding of more than three dims as slice adjoints.
#include "ops/pad.h"

#include <algorithm>
#include <vector>

#include "autograd/grad_mode.h"
#include "autograd/node.h"
#include "ops/dispatch.h"
#include "ops/elementwise.h"
#include "ops/index.h"
#include "ops/logical.h"
#include "ops/op_utils.h"
#include "ops/pad_map.h"
#include "ops/shape.h"

namespace mpx {
namespace {
using autograd::FunctionNode;

// Constant padding of any number of dims: negative pads crop first, then slice_backward grows the positive ones
// (zeros around the data); a non-zero value is written where a mask of the data's positions is 0.
Tensor constant_pad_any(const Tensor& x, const IntList& p, double value) {
  Tensor out = x;
  Tensor mask;  // 1 where data came from x; only needed for a non-zero fill value
  const bool fill = value != 0.0;
  if (fill) mask = ones_like(x);
  for (size_t i = 0; i < p.size() / 2; ++i) {
    const int64_t d = x.dim() - 1 - static_cast<int64_t>(i);
    int64_t left = p[2 * i], right = p[2 * i + 1];
    const int64_t lc = left < 0 ? -left : 0, rc = right < 0 ? -right : 0;
    if (lc || rc) {
      MPX_CHECK(lc + rc < out.size(d), "pad: cropping ", lc + rc, " from dim ", d, " of ", ops::describe(out),
                " leaves nothing");
      out = out.narrow(d, lc, out.size(d) - lc - rc);
      if (fill) mask = mask.narrow(d, lc, mask.size(d) - lc - rc);
    }
    left = std::max<int64_t>(left, 0);
    right = std::max<int64_t>(right, 0);
    if (left || right) {
      IntList shape = out.sizes();
      shape[d] += left + right;
      out = slice_backward(out, shape, d, left, 1);
      if (fill) {
        NoGradGuard ng;
        mask = slice_backward(mask, shape, d, left, 1);
      }
    }
  }
  if (!fill) return out;
  Tensor outside;
  {
    NoGradGuard ng;
    outside = eq(mask, 0.0);
  }
  return masked_fill(out, outside, value);
}

enum class Mode { Constant, Reflect, Replicate, Circular };

// The input position each output position of one dim reads (-1: the fill value). As PyTorch: constant and reflect
// map about the input's own edges (a negative pad crops there, and reflect's other side may still reach into the
// cropped part); replicate and circular crop by the negative pads first and pad what is left.
std::vector<int64_t> source_positions(Mode mode, int64_t n, int64_t left, int64_t right, const char* name, int64_t d,
                                      const Tensor& x) {
  MPX_CHECK(mode == Mode::Constant || n > 0, "pad: dim ", d, " of ", ops::describe(x), " is empty; ", name,
            " padding needs at least one element to copy");
  const bool grows_empty = mode == Mode::Constant && n == 0 && left >= 0 && right >= 0;
  MPX_CHECK(grows_empty || n + std::min<int64_t>(left, 0) + std::min<int64_t>(right, 0) > 0, "pad: ", name, " padding (", left, ", ", right, ") crops all of dim ", d, " of ", ops::describe(x));
  const bool about_edges = mode == Mode::Constant || mode == Mode::Reflect;
  const int64_t lc = about_edges ? 0 : std::max<int64_t>(-left, 0), rc = about_edges ? 0 : std::max<int64_t>(-right, 0);
  const int64_t m = n - lc - rc;  // the size the mode maps into
  const int64_t l = about_edges ? left : std::max<int64_t>(left, 0), r = about_edges ? right : std::max<int64_t>(right, 0);
  if (mode == Mode::Reflect)
    MPX_CHECK(l < m && r < m, "pad: reflect padding (", left, ", ", right, ") must be smaller than dim ", d,
              "'s size ", m, " of ", ops::describe(x), "; use mode replicate or circular for more");
  if (mode == Mode::Circular)
    MPX_CHECK(l <= m && r <= m, "pad: circular padding (", left, ", ", right, ") would wrap around dim ", d,
              " of ", ops::describe(x), " more than once (size ", m, " after cropping)");
  std::vector<int64_t> src(static_cast<size_t>(m + l + r));
  for (int64_t j = 0; j < m + l + r; ++j) {
    int64_t i = j - l;
    switch (mode) {
      case Mode::Constant:
        if (i < 0 || i >= m) {
          src[static_cast<size_t>(j)] = -1;
          continue;
        }
        break;
      case Mode::Reflect: i = i < 0 ? -i : (i >= m ? 2 * (m - 1) - i : i); break;
      case Mode::Replicate: i = std::clamp<int64_t>(i, 0, m - 1); break;
      case Mode::Circular: i = i < 0 ? i + m : (i >= m ? i - m : i); break;
    }
    src[static_cast<size_t>(j)] = lc + i;
  }
  return src;
}

// One axis's map in padmap::Axis's layout, on `dev`.
struct AxisMap {
  Tensor map;
  int64_t in = 1, out = 1;
};
AxisMap axis_map(const std::vector<int64_t>& src, int64_t n_in, Device dev) {
  const int64_t n_out = static_cast<int64_t>(src.size());
  std::vector<int64_t> m(static_cast<size_t>(padmap::map_size(n_in, n_out)), 0);
  int64_t* off = m.data() + n_out;
  int64_t* readers = off + n_in + 1;
  for (int64_t j = 0; j < n_out; ++j) {
    m[static_cast<size_t>(j)] = src[static_cast<size_t>(j)];
    if (src[static_cast<size_t>(j)] >= 0) ++off[src[static_cast<size_t>(j)] + 1];
  }
  for (int64_t k = 0; k < n_in; ++k) off[k + 1] += off[k];
  std::vector<int64_t> next(off, off + n_in);
  for (int64_t j = 0; j < n_out; ++j)  // ascending j: each input's readers come out sorted
    if (src[static_cast<size_t>(j)] >= 0) readers[next[static_cast<size_t>(src[static_cast<size_t>(j)])]++] = j;
  return {tensor(m, {static_cast<int64_t>(m.size())}).to(dev), n_in, n_out};
}
AxisMap identity_map(int64_t n, Device dev) {
  std::vector<int64_t> src(static_cast<size_t>(n));
  for (int64_t j = 0; j < n; ++j) src[static_cast<size_t>(j)] = j;
  return axis_map(src, n, dev);
}

// The kernel's gather x [outer, Di, Hi, Wi] -> [outer, Do, Ho, Wo] (`adjoint`: its transpose). Each direction's
// backward is the other, so any order of derivative is exact.
Tensor pad_pass(const Tensor& x, const AxisMap (&a)[3], double value, bool adjoint) {
  const auto size = [adjoint](const AxisMap& m) { return adjoint ? m.in : m.out; };
  Tensor out = empty({x.size(0), size(a[0]), size(a[1]), size(a[2])}, x.options());
  if (out.numel() > 0) {
    NoGradGuard ng;
    dispatch::kernel<kernels::PadFn>(adjoint ? OpId::pad_backward : OpId::pad, x.device(), x.dtype())(
        out, x.detach().contiguous(), a[0].map, a[1].map, a[2].map, value);
  }
  if (auto n = autograd::record(adjoint ? "PadBackwardBackward" : "PadBackward", {x}, {out},
                                [](FunctionNode& self, const tensor_list& g) -> tensor_list {
        const IntList& s = self.shapes[0];
        const AxisMap m[3] = {{self.saved(0), s[0], s[1]}, {self.saved(1), s[2], s[3]}, {self.saved(2), s[4], s[5]}};
        return {pad_pass(g[0], m, 0.0, self.scalars[0] == 0.0)};
      })) {
    for (const AxisMap& m : a) n->save(m.map);
    n->shapes = {{a[0].in, a[0].out, a[1].in, a[1].out, a[2].in, a[2].out}};
    n->scalars = {adjoint ? 1.0 : 0.0};
  }
  return out;
}

}  // namespace

Tensor pad(const Tensor& x, const IntList& p, const std::string& mode_name, double value) {
  MPX_CHECK(x.defined(), "pad: input is undefined");
  MPX_CHECK(p.size() % 2 == 0 && static_cast<int64_t>(p.size()) / 2 <= x.dim(), "pad: expected an even number of ",
            "pad values covering at most ", x.dim(), " dims of ", ops::describe(x), ", got ", p.size());
  Mode mode;
  if (mode_name == "constant") mode = Mode::Constant;
  else if (mode_name == "reflect") mode = Mode::Reflect;
  else if (mode_name == "replicate") mode = Mode::Replicate;
  else if (mode_name == "circular") mode = Mode::Circular;
  else MPX_ERROR("pad: unknown mode '", mode_name, "'; expected constant, reflect, replicate or circular");
  const int64_t dims = static_cast<int64_t>(p.size()) / 2;
  if (mode == Mode::Constant && dims > 3) return constant_pad_any(x, p, value);
  MPX_CHECK(mode == Mode::Constant || (dims >= 1 && dims <= 3 && (x.dim() == dims + 1 || x.dim() == dims + 2)),
            "pad: ", mode_name, " padding with ", p.size(), " values needs ", dims + 1, "-d or ", dims + 2,
            "-d input (", dims, " padded dims, unbatched or batched), got ", ops::describe(x),
            "; non-constant modes take 2 values for 2-d/3-d input, 4 for 3-d/4-d, 6 for 4-d/5-d");
  if (dims == 0) return x.clone();
  // The last three dims (1 for those x lacks) as the kernel's D, H, W; unpadded ones keep identity maps.
  const int64_t lead = std::max<int64_t>(x.dim() - 3, 0);
  int64_t outer = 1;
  for (int64_t d = 0; d < lead; ++d) outer *= x.size(d);
  AxisMap maps[3];
  IntList shape = x.sizes();
  for (int64_t k = 0; k < 3; ++k) {
    const int64_t d = x.dim() - 3 + k;  // dim of x this axis is (negative: absent, size 1)
    const int64_t n = d >= 0 ? x.size(d) : 1, i = 2 - k;  // i: the pad pair of this axis
    if (i < dims && (p[static_cast<size_t>(2 * i)] != 0 || p[static_cast<size_t>(2 * i + 1)] != 0)) {
      const std::vector<int64_t> src = source_positions(mode, n, p[static_cast<size_t>(2 * i)],
                                                        p[static_cast<size_t>(2 * i + 1)], mode_name.c_str(), d, x);
      maps[k] = axis_map(src, n, x.device());
      shape[static_cast<size_t>(d)] = maps[k].out;
    } else {
      maps[k] = identity_map(n, x.device());
    }
  }
  // A channels-last [N, C, H, W] is a contiguous [N, H, W, C]: its H and W maps with C kept padded in place, so the
  // output stays channels-last (no layout round trip around a convolution's input).
  if (x.dim() == 4 && dims <= 2 && !x.is_contiguous() && x.is_contiguous(MemoryFormat::ChannelsLast)) {
    const AxisMap nhwc[3] = {maps[1], maps[2], maps[0]};  // maps[0] is C's identity
    return pad_pass(x.permute({0, 2, 3, 1}), nhwc, value, false).permute({0, 3, 1, 2});
  }
  return pad_pass(x.reshape({outer, maps[0].in, maps[1].in, maps[2].in}), maps, value, false).view(shape);
}

}  // namespace mpx
