// Normalization ops: batch_norm on its own kernels (running statistics, f32 statistics for
// low-precision input) and group_norm composed from differentiable ops (the row norms
// layer_norm and rms_norm live in ops/row_norm.cpp).
#include "ops/norm.h"

#include <array>

#include "ops/elementwise.h"
#include "ops/op_utils.h"
#include "ops/reduction.h"

namespace mpx {
namespace {
using autograd::FunctionNode;

DType stat_dtype(DType x) { return x == kFloat64 ? kFloat64 : kFloat32; }

bool channels_last(const Tensor& t) {
  return t.dim() == 4 && !t.is_contiguous() && t.is_contiguous(MemoryFormat::ChannelsLast);
}

// Every dim but 1, and the [1, C, 1, ...] shape per-channel values broadcast with.
IntList non_channel_dims(int64_t nd) {
  IntList d{0};
  for (int64_t i = 2; i < nd; ++i) d.push_back(i);
  return d;
}
IntList channel_shape(int64_t nd, int64_t C) {
  IntList s(static_cast<size_t>(nd), 1);
  s[1] = C;
  return s;
}

// A dense [C] copy in the statistics dtype (no autograd), or undefined.
Tensor stat_copy(const Tensor& t, DType sd) {
  if (!t.defined()) return t;
  NoGradGuard ng;
  return t.to(sd).contiguous();
}

// Batch-norm backward written with differentiable ops, used when the backward itself is
// recorded (create_graph): the statistics are recomputed from x so second derivatives are exact.
tensor_list batch_norm_backward_composite(const Tensor& gy, const Tensor& x, const Tensor& w, const Tensor& mean_s,
                                          const Tensor& invstd_s, bool training, double eps) {
  const DType sd = stat_dtype(x.dtype());
  const IntList dims = non_channel_dims(x.dim());
  const IntList cs = channel_shape(x.dim(), x.size(1));
  Tensor xf = x.to(sd), gf = gy.to(sd);
  Tensor mean, invstd;
  if (training) {
    mean = mpx::mean(xf, dims, true);
    invstd = rsqrt(var(xf, dims, false, true) + eps);
  } else {
    mean = mean_s.reshape(cs);
    invstd = invstd_s.reshape(cs);
  }
  Tensor xhat = (xf - mean) * invstd;
  Tensor scale = w.defined() ? invstd * w.to(sd).reshape(cs) : invstd;
  Tensor gx = training ? (gf - mpx::mean(gf, dims, true) - xhat * mpx::mean(gf * xhat, dims, true)) * scale : gf * scale;
  return {gx.to(x.dtype()), sum(gf * xhat, dims), sum(gf, dims)};
}

}  // namespace


namespace {
// What batch_norm and batch_norm_add_relu check and derive alike.
struct BnArgs {
  Tensor x, w, b;
  int64_t C = 0, M = 0;  // channels, values per channel
  DType sd = kFloat32;   // statistics dtype
  bool nhwc = false;     // the kernel sees channels-last x as it is, else [N, C, S]
  IntList s3;            // [N, C, S]: the row-major view the kernels take
};
BnArgs check_bn(const char* op, const Tensor& x0, const Tensor& running_mean, const Tensor& running_var,
                const Tensor& weight0, const Tensor& bias0, bool training, OpId id) {
  MPX_CHECK(x0.defined(), op, ": input is undefined");
  // The running statistics are updated in place, so they never go through autocast.
  auto in = ops::autocast(id, {x0, weight0, bias0});
  BnArgs a;
  a.x = in[0];
  a.w = in[1];
  a.b = in[2];
  const Tensor& x = a.x;
  MPX_CHECK(x.dim() >= 2, op, ": expected an input [N, C, *] with at least 2 dims, got ", ops::describe(x));
  MPX_CHECK(is_floating(x.dtype()), op, ": input must be floating point, got ", ops::describe(x));
  a.C = x.size(1);
  auto check_vec = [&](const Tensor& t, const char* what) {
    MPX_CHECK(!t.defined() || (t.dim() == 1 && t.size(0) == a.C && is_floating(t.dtype())), op, ": ", what, " ",
              ops::describe(t), " must be a floating 1-d tensor of ", a.C, " elements (the channels of input ",
              ops::describe(x), ")");
  };
  check_vec(a.w, "weight");
  check_vec(a.b, "bias");
  check_vec(running_mean, "running_mean");
  check_vec(running_var, "running_var");
  MPX_CHECK(running_mean.defined() == running_var.defined(), op,
            ": give both running_mean and running_var, or neither");
  MPX_CHECK(training || running_mean.defined(), op,
            ": evaluation mode needs running_mean and running_var (or call with training=true)");
  ops::common_device(op, {x, a.w, a.b, running_mean, running_var});
  a.M = x.numel() / std::max<int64_t>(a.C, 1);
  MPX_CHECK(!training || a.M > 1, op, ": expected more than 1 value per channel when training, got input ",
            ops::describe(x));
  a.sd = stat_dtype(x.dtype());
  // Channels-last activations go to the kernels as they are (cuDNN's persistent NHWC kernels
  // in training, the CPU's channels-last loops); row-major ones as [N, C, S] views.
  a.nhwc = channels_last(x);
  a.s3 = {x.size(0), a.C, x.numel() == 0 ? 0 : x.numel() / (x.size(0) * a.C)};
  return a;
}

// Statistics buffers [C]: the running ones copied in for eval.
std::array<Tensor, 3> bn_stats(const BnArgs& a, const Tensor& running_mean, const Tensor& running_var,
                               bool training) {
  const TensorOptions so = TensorOptions().dtype(a.sd).device(a.x.device());
  std::array<Tensor, 3> st{empty({a.C}, so), empty({a.C}, so), empty({a.C}, so)};  // mean, var, invstd
  if (!training) {
    NoGradGuard ng;
    st[0].copy_(running_mean);
    st[1].copy_(running_var);
  }
  return st;
}

// The running statistics as the kernels take them ([C], contiguous, statistics dtype): the
// buffers themselves, or scratch copies that finish_running writes back (running stats kept in
// another dtype, e.g. f16 at O3 without keep_batchnorm_fp32, or strided views).
kernels::BnRunning running_for_kernel(const BnArgs& a, const Tensor& running_mean, const Tensor& running_var,
                                      bool training, double momentum) {
  if (!training || !running_mean.defined()) return {};
  NoGradGuard ng;
  auto as_kernel = [&](const Tensor& t) { return t.dtype() == a.sd && t.is_contiguous() ? t : t.to(a.sd).contiguous(); };
  return {as_kernel(running_mean), as_kernel(running_var), momentum};
}
void finish_running(const kernels::BnRunning& r, const Tensor& running_mean, const Tensor& running_var) {
  if (!r.mean.defined()) return;
  NoGradGuard ng;
  for (auto [kernel, buffer] : {std::pair{r.mean, running_mean}, std::pair{r.var, running_var}}) {
    if (kernel.is_same(buffer)) buffer.bump_version();  // the kernel wrote it in place
    else buffer.copy_(kernel);
  }
}

// The backward's results: weight and bias gradients (the last two) in the parameters' dtypes,
// nothing for inputs that take no gradient.
tensor_list finish_grads(FunctionNode& self, tensor_list r, const Tensor& w, const Tensor& b) {
  const size_t k = r.size();
  if (r[k - 2].defined() && w.defined() && r[k - 2].dtype() != w.dtype()) r[k - 2] = r[k - 2].to(w.dtype());
  if (r[k - 1].defined() && b.defined() && r[k - 1].dtype() != b.dtype()) r[k - 1] = r[k - 1].to(b.dtype());
  for (size_t i = 0; i < k; ++i)
    if (!self.next_edges[i].valid()) r[i] = Tensor();
  return r;
}

// The layout the kernels write gradients/outputs in for x.
TensorOptions kernel_layout(const Tensor& x, bool nhwc) {
  return nhwc ? x.options().memory_format(MemoryFormat::ChannelsLast) : x.options();
}
}  // namespace

Tensor batch_norm(const Tensor& x0, const Tensor& running_mean, const Tensor& running_var, const Tensor& weight0,
                  const Tensor& bias0, bool training, double momentum, double eps) {
  const BnArgs a = check_bn("batch_norm", x0, running_mean, running_var, weight0, bias0, training, OpId::batch_norm);
  const Tensor &x = a.x, &w = a.w, &b = a.b;
  const bool nhwc = a.nhwc;
  auto [mean, var, invstd] = bn_stats(a, running_mean, running_var, training);
  Tensor y = empty(x.sizes(), kernel_layout(x, nhwc)), reserve;
  {
    NoGradGuard ng;
    Tensor xc = nhwc ? x : x.contiguous();
    const kernels::BnRunning run = running_for_kernel(a, running_mean, running_var, training, momentum);
    if (x.numel() > 0)
      reserve = dispatch::kernel<OpId::batch_norm>(x.device(), x.dtype())(
          nhwc ? y : y.view(a.s3), mean, var, invstd, nhwc ? xc : xc.view(a.s3), stat_copy(w, a.sd),
          stat_copy(b, a.sd), training, eps, run);
    finish_running(run, running_mean, running_var);
  }
  auto backward = [training, eps, s3 = a.s3, nhwc](FunctionNode& self, const tensor_list& g) -> tensor_list {
    Tensor x = self.saved(0), w = self.saved(1), b = self.saved(2);
    Tensor mean = self.saved(3), invstd = self.saved(4), reserve = self.saved(5);
    Tensor gy = g[0].dtype() == x.dtype() ? g[0] : g[0].to(x.dtype());
    tensor_list r;
    if (GradMode::is_enabled()) {
      r = batch_norm_backward_composite(gy, x, w, mean, invstd, training, eps);
    } else {
      const int64_t C = x.size(1);
      const TensorOptions so = mean.options();
      Tensor gx = self.next_edges[0].valid() ? empty(x.sizes(), kernel_layout(x, nhwc)) : Tensor();
      Tensor gw = self.next_edges[1].valid() ? empty({C}, so) : Tensor();
      Tensor gb = self.next_edges[2].valid() ? empty({C}, so) : Tensor();
      if (x.numel() > 0) {
        auto as3 = [&](const Tensor& t) {
          return !t.defined() ? t : nhwc ? t.contiguous(MemoryFormat::ChannelsLast) : t.contiguous().view(s3);
        };
        dispatch::kernel<OpId::batch_norm_backward>(x.device(), x.dtype())(
            as3(gx), gw, gb, as3(gy), as3(x), mean, invstd, stat_copy(w, mean.dtype()), reserve, training);
      } else {
        if (gw.defined()) gw.zero_();
        if (gb.defined()) gb.zero_();
      }
      r = {gx, gw, gb};
    }
    return finish_grads(self, std::move(r), w, b);
  };
  if (auto n = autograd::record("BatchNormBackward", {x, w, b}, {y}, backward))
    for (const Tensor& t : {x, w, b, mean, invstd, reserve}) n->save(t);
  return y;
}

namespace {
// relu(batch_norm(x) + z), or relu(batch_norm(x)) when z is undefined, on the fused kernels
// (batch_norm_add_relu's or batch_norm_relu's); the composite where they do not apply.
Tensor bn_relu(const Tensor& x0, const Tensor& z, const Tensor& running_mean, const Tensor& running_var,
               const Tensor& weight0, const Tensor& bias0, bool training, double momentum, double eps) {
  const bool add = z.defined();
  const char* op = add ? "batch_norm_add_relu" : "batch_norm_relu";
  const OpId fwd = add ? OpId::batch_norm_add_relu : OpId::batch_norm_relu;
  const BnArgs a = check_bn(op, x0, running_mean, running_var, weight0, bias0, training, fwd);
  const Tensor &x = a.x, &w = a.w, &b = a.b;
  // The kernels take z exactly like x; a broadcast z or one of another dtype (the add would
  // promote) goes through the composite, which defines the result.
  if ((add && (z.sizes() != x.sizes() || z.dtype() != x.dtype() || z.device() != x.device())) || x.numel() == 0 ||
      !dispatch::has_kernel(fwd, x.device().type, x.dtype())) {
    const Tensor y = batch_norm(x, running_mean, running_var, w, b, training, momentum, eps);
    return relu(add ? y + z : y);
  }

  const bool nhwc = a.nhwc;
  const MemoryFormat kf = nhwc ? MemoryFormat::ChannelsLast : MemoryFormat::Contiguous;
  auto as_kernel = [&](const Tensor& t) { return nhwc ? t.contiguous(kf) : t.contiguous().view(a.s3); };
  auto [mean, var, invstd] = bn_stats(a, running_mean, running_var, training);
  Tensor y = empty(x.sizes(), kernel_layout(x, nhwc)), reserve;
  {
    NoGradGuard ng;
    const kernels::BnRunning run = running_for_kernel(a, running_mean, running_var, training, momentum);
    const Tensor ws = stat_copy(w, a.sd), bs = stat_copy(b, a.sd);
    reserve = add ? dispatch::kernel<OpId::batch_norm_add_relu>(x.device(), x.dtype())(
                        as_kernel(y), mean, var, invstd, as_kernel(x), as_kernel(z), ws, bs, training, eps, run)
                  : dispatch::kernel<OpId::batch_norm_relu>(x.device(), x.dtype())(
                        as_kernel(y), mean, var, invstd, as_kernel(x), ws, bs, training, eps, run);
    finish_running(run, running_mean, running_var);
  }
  auto backward = [add, training, eps, s3 = a.s3, nhwc](FunctionNode& self, const tensor_list& g) -> tensor_list {
    Tensor x = self.saved(0), y = self.saved(1), w = self.saved(2), b = self.saved(3);
    Tensor mean = self.saved(4), invstd = self.saved(5), reserve = self.saved(6);
    Tensor gy = g[0].dtype() == x.dtype() ? g[0] : g[0].to(x.dtype());
    tensor_list r;
    if (GradMode::is_enabled()) {
      // Recorded backward (create_graph): the composite's, from differentiable ops.
      Tensor gr = threshold_backward(gy, y, 0.0);
      r = batch_norm_backward_composite(gr, x, w, mean, invstd, training, eps);
      if (add) r.insert(r.begin() + 1, gr);
    } else {
      const int64_t C = x.size(1);
      const size_t k = add ? 1 : 0;  // inputs: x, z (add only), weight, bias
      const TensorOptions so = mean.options(), xo = kernel_layout(x, nhwc);
      auto as_kernel = [&](const Tensor& t) {
        return !t.defined() ? t : nhwc ? t.contiguous(MemoryFormat::ChannelsLast) : t.contiguous().view(s3);
      };
      Tensor gx = self.next_edges[0].valid() ? empty(x.sizes(), xo) : Tensor();
      Tensor gz = add && self.next_edges[1].valid() ? empty(x.sizes(), xo) : Tensor();
      Tensor gw = self.next_edges[k + 1].valid() ? empty({C}, so) : Tensor();
      Tensor gb = self.next_edges[k + 2].valid() ? empty({C}, so) : Tensor();
      if (!nhwc) gy = gy.contiguous();
      const Tensor ws = stat_copy(w, mean.dtype()), bs = stat_copy(b, mean.dtype());
      if (add)
        dispatch::kernel<OpId::batch_norm_add_relu_backward>(x.device(), x.dtype())(
            as_kernel(gx), as_kernel(gz), gw, gb, as_kernel(gy), as_kernel(x), as_kernel(y), mean, invstd, ws, bs,
            reserve, training);
      else
        dispatch::kernel<OpId::batch_norm_relu_backward>(x.device(), x.dtype())(
            as_kernel(gx), gw, gb, as_kernel(gy), as_kernel(x), as_kernel(y), mean, invstd, ws, bs, reserve,
            training);
      r = add ? tensor_list{gx, gz, gw, gb} : tensor_list{gx, gw, gb};
    }
    return finish_grads(self, std::move(r), w, b);
  };
  const tensor_list inputs = add ? tensor_list{x, z, w, b} : tensor_list{x, w, b};
  if (auto n = autograd::record(add ? "BatchNormAddReluBackward" : "BatchNormReluBackward", inputs, {y}, backward)) {
    n->save(x);
    n->save(y, true);
    for (const Tensor& t : {w, b, mean, invstd, reserve}) n->save(t);
  }
  return y;
}
}  // namespace

Tensor batch_norm_add_relu(const Tensor& x, const Tensor& z, const Tensor& running_mean, const Tensor& running_var,
                           const Tensor& weight, const Tensor& bias, bool training, double momentum, double eps) {
  MPX_CHECK(z.defined(), "batch_norm_add_relu: the residual z is undefined (batch_norm_relu is the fused op "
                         "without one)");
  return bn_relu(x, z, running_mean, running_var, weight, bias, training, momentum, eps);
}

Tensor batch_norm_relu(const Tensor& x, const Tensor& running_mean, const Tensor& running_var, const Tensor& weight,
                       const Tensor& bias, bool training, double momentum, double eps) {
  return bn_relu(x, Tensor(), running_mean, running_var, weight, bias, training, momentum, eps);
}

Tensor group_norm(const Tensor& x0, int64_t num_groups, const Tensor& weight0, const Tensor& bias0, double eps) {
  MPX_CHECK(x0.defined(), "group_norm: input is undefined");
  auto in = ops::autocast(OpId::group_norm, {x0, weight0, bias0});
  const Tensor &x = in[0], &w = in[1], &b = in[2];
  MPX_CHECK(x.dim() >= 2, "group_norm: expected an input [N, C, *] with at least 2 dims, got ", ops::describe(x));
  MPX_CHECK(is_floating(x.dtype()), "group_norm: input must be floating point, got ", ops::describe(x));
  const int64_t C = x.size(1);
  MPX_CHECK(num_groups > 0 && C % num_groups == 0, "group_norm: the ", C, " channels of input ", ops::describe(x),
            " are not divisible by num_groups=", num_groups);
  MPX_CHECK(!w.defined() || (w.dim() == 1 && w.size(0) == C), "group_norm: weight ", ops::describe(w), " must be [",
            C, "]");
  MPX_CHECK(!b.defined() || (b.dim() == 1 && b.size(0) == C), "group_norm: bias ", ops::describe(b), " must be [", C,
            "]");
  const DType sd = stat_dtype(x.dtype());
  const int64_t N = x.size(0);
  Tensor xg = x.to(sd).reshape({N, num_groups, -1});
  Tensor y = ((xg - mean(xg, {2}, true)) * rsqrt(var(xg, {2}, false, true) + eps)).reshape(x.sizes());
  const IntList cs = channel_shape(x.dim(), C);
  if (w.defined()) y = y * w.to(sd).reshape(cs);
  if (b.defined()) y = y + b.to(sd).reshape(cs);
  return y.to(x.dtype());
}

}  // namespace mpx
