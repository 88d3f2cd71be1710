// Fused amp ops: argument checks and layout fix-ups around the unscale_check_inf kernel.
#include "ops/amp.h"

#include "autograd/grad_mode.h"
#include "ops/dispatch.h"
#include "ops/op_utils.h"

namespace mpx {
namespace {

// 0 row-major, 1 channels-last, -1 not dense: kernels walk dense pairs of one layout as flat arrays.
int layout_kind(const Tensor& t) {
  if (t.is_contiguous()) return 0;
  if (t.dim() == 4 && t.is_contiguous(MemoryFormat::ChannelsLast)) return 1;
  return -1;
}
Tensor empty_in_layout(const Tensor& like, DType dt) {
  TensorOptions o = TensorOptions().dtype(dt).device(like.device());
  if (layout_kind(like) == 1) o.memory_format(MemoryFormat::ChannelsLast);
  return empty(like.sizes(), o);
}

}  // namespace

void unscale_check_inf_(const tensor_list& grads_in, const tensor_list& grads_out, const Tensor& inv_scale,
                        const Tensor& found_inf) {
  const bool check_only = grads_out.empty();
  MPX_CHECK(check_only || grads_in.size() == grads_out.size(), "unscale_check_inf_: ", grads_in.size(),
            " inputs but ", grads_out.size(), " outputs; pass one output per gradient (the gradient itself to "
            "unscale in place), or none to only check");
  MPX_CHECK(inv_scale.defined() && inv_scale.dtype() == kFloat32 && inv_scale.numel() == 1,
            "unscale_check_inf_: inv_scale must be a one-element f32 tensor, got ",
            ops::describe(inv_scale));
  MPX_CHECK(found_inf.defined() && found_inf.dtype() == kFloat32 && found_inf.numel() == 1,
            "unscale_check_inf_: found_inf must be a one-element f32 tensor, got ",
            ops::describe(found_inf));
  const Device dev = found_inf.device();
  MPX_CHECK(inv_scale.device() == dev, "unscale_check_inf_: inv_scale is on ", inv_scale.device().str(),
            " but found_inf on ", dev.str(), "; call it once per device");
  NoGradGuard ng;
  tensor_list in, out;
  std::vector<std::pair<Tensor, Tensor>> copy_back;  // (user's output, dense temporary) when not dense
  in.reserve(grads_in.size());
  out.reserve(grads_in.size());
  for (size_t i = 0; i < grads_in.size(); ++i) {
    const Tensor& g = grads_in[i];
    if (check_only) {
      MPX_CHECK(g.defined() && is_floating(g.dtype()) && g.device() == dev, "unscale_check_inf_: gradient ", i,
                " must be a floating tensor on ", dev.str(), ", got ",
                ops::describe(g));
      if (g.numel()) in.push_back(layout_kind(g) < 0 ? g.contiguous() : g);
      continue;
    }
    const Tensor& o = grads_out[i];
    MPX_CHECK(g.defined() && o.defined(), "unscale_check_inf_: gradient ", i, " or its output is undefined; ",
              "leave parameters without gradients out of the lists");
    MPX_CHECK(is_floating(g.dtype()), "unscale_check_inf_: gradient ", i, " is ", ops::describe(g),
              "; only floating gradients can be unscaled");
    const DType wide = g.dtype() == kFloat64 ? kFloat64 : kFloat32, want = o.dtype();
    MPX_CHECK(want == wide || want == g.dtype(), "unscale_check_inf_: output ", i, " is ", ops::describe(o),
              " but a ", dtype_name(g.dtype()), " gradient unscales into ", dtype_name(wide),
              wide == g.dtype() ? "" : " (or in place)");
    MPX_CHECK(o.sizes() == g.sizes(), "unscale_check_inf_: output ", i, " has shape ", shape_str(o.sizes()),
              " but its gradient ", shape_str(g.sizes()));
    MPX_CHECK(g.device() == dev && o.device() == dev, "unscale_check_inf_: gradient ", i, " (", ops::describe(g),
              ") or its output (", ops::describe(o), ") is not on found_inf's device ", dev.str());
    if (g.numel() == 0) continue;
    Tensor oo = o;
    if (layout_kind(o) < 0) {
      oo = empty_in_layout(o, want);
      copy_back.emplace_back(o, oo);
    }
    Tensor gg = g;
    if (layout_kind(g) != layout_kind(oo) || g.strides() != oo.strides()) {
      if (g.is_same(o)) gg = oo;  // in place on a non-dense tensor: the temporary gets the input first
      else gg = empty_in_layout(oo, g.dtype());
      gg.copy_(g);
    }
    in.push_back(gg);
    out.push_back(oo);
  }
  if (!in.empty()) {
    auto fn = dispatch::kernel<OpId::unscale_check_inf>(dev, kFloat32);
    fn(in, out, inv_scale, found_inf);
  }
  for (auto& [user, tmp] : copy_back) user.copy_(tmp);
  for (const Tensor& o : grads_out) if (o.defined()) o.bump_version();
  found_inf.bump_version();
}

void update_scale_(const Tensor& scale, const Tensor& growth_tracker, const Tensor& skipped, const Tensor& found_inf,
                   double growth_factor, double backoff_factor, int64_t growth_interval, double max_scale) {
  for (const Tensor* t : {&scale, &growth_tracker, &found_inf, &skipped}) {
    if (t == &skipped && !t->defined()) continue;
    MPX_CHECK(t->defined() && t->dtype() == kFloat32 && t->numel() == 1 && t->device() == scale.device(),
              "update_scale_: scale, growth_tracker, skipped and found_inf must be one-element f32 tensors on one "
              "device, got ", ops::describe(*t), " beside scale ",
              ops::describe(scale));
  }
  auto fn = dispatch::kernel<OpId::update_scale>(scale.device(), kFloat32);
  fn(scale, growth_tracker, skipped, found_inf, growth_factor, backoff_factor, growth_interval, max_scale);
  scale.bump_version();
  growth_tracker.bump_version();
  if (skipped.defined()) skipped.bump_version();
}

}  // namespace mpx
