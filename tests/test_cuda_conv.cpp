// Tests for the cuDNN conv2d / conv_transpose2d / batch_norm kernels against the CPU (forward and
// autograd backward, NCHW and channels-last, f32/f64/f16/bf16), the algorithm switches, and a
// ResNet-18 SGD step on the device.
#include <catch2/catch.hpp>

#include <mpx/mpx.h>

#include <string>
#include <vector>

#include "ops/dispatch.h"
#include "test_util.h"

using namespace mpx;
using testing::cuda_ready;
using testing::error_of;
using testing::rel_err;

namespace {

const std::vector<DType> kTypes = {kFloat32, kFloat16, kBFloat16, kFloat64};

// The bound for a device convolution against the CPU's im2col + GEMM (or oneDNN) kernels.
// f32: cuDNN's heuristic picks FFT and Winograd algorithms for some shapes, which transform the
// operands and lose a few more bits than a direct sum (measured ~1e-6..3e-5 norm-wise), so 1e-4
// rather than 1e-5. f16: both sides accumulate in f32 and round once, but the bias is added to
// the already-rounded convolution (a second f16 rounding the CPU does not make), so 2e-3.
// bf16 keeps the 1e-2 of the table. f64 sums in another order only.
double conv_tol(DType dt) {
  switch (dt) {
    case kFloat32: return cuda::tf32_allowed() ? 5e-3 : 1e-4;
    case kFloat16: return 2e-3;
    case kBFloat16: return 1e-2;
    default: return 1e-10;
  }
}
// Batch norm: the same per-element formula on both sides, statistics summed in another order.
double bn_tol(DType dt) { return dt == kFloat64 ? 1e-10 : testing::cuda_tolerance(dt); }

void expect_close(const Tensor& got, const Tensor& ref, double tol, const std::string& what) {
  INFO(what << ": " << dtype_name(ref.dtype()) << " " << shape_str(ref.sizes()));
  REQUIRE(got.defined());
  REQUIRE(ref.defined());
  REQUIRE(got.device().is_cuda());
  REQUIRE(got.dtype() == ref.dtype());
  const double e = rel_err(got, ref);
  INFO("rel err " << e << ", bound " << tol);
  CHECK(e < tol);
}

// A CPU leaf of dtype dt and its device twin (dense copy, optionally channels-last), both leaves
// that require grad.
struct Pair2 {
  Tensor cpu, dev;
};
Pair2 leaves_of(const Tensor& base, bool channels_last) {
  Tensor c = base.detach().set_requires_grad(true);
  Tensor d = base.to(Device::cuda());
  if (channels_last) d = d.contiguous(MemoryFormat::ChannelsLast);
  d = d.detach().set_requires_grad(true);
  return {c, d};
}
Pair2 leaves(const IntList& shape, DType dt, bool channels_last = false, double scale = 1.0) {
  return leaves_of((randn(shape) * scale).to(dt), channels_last);
}

struct ConvCase {
  const char* name;
  int64_t N, C, H, W, O, kh, kw;
  Pair stride, padding, dilation;
  int64_t groups;
  bool bias;
};

const std::vector<ConvCase> kConvCases = {
    {"3x3 pad 1", 2, 3, 9, 11, 4, 3, 3, {1, 1}, {1, 1}, {1, 1}, 1, true},
    {"stride 2, odd sizes", 3, 5, 13, 10, 6, 3, 3, {2, 2}, {1, 1}, {1, 1}, 1, true},
    {"dilation 2", 2, 4, 12, 12, 8, 3, 3, {1, 1}, {2, 2}, {2, 2}, 1, false},
    {"groups 2", 2, 6, 8, 9, 4, 3, 3, {1, 1}, {0, 0}, {1, 1}, 2, true},
    {"depthwise stride 2", 2, 8, 11, 11, 8, 3, 3, {2, 2}, {1, 1}, {1, 1}, 8, true},
    {"depthwise x2", 1, 4, 7, 7, 8, 3, 3, {1, 1}, {1, 1}, {1, 1}, 4, false},
    {"1x1", 2, 16, 6, 5, 32, 1, 1, {1, 1}, {0, 0}, {1, 1}, 1, false},
    {"7x7 stride 2 pad 3", 2, 3, 23, 23, 8, 7, 7, {2, 2}, {3, 3}, {1, 1}, 1, false},
    {"batch 1", 1, 8, 7, 7, 16, 3, 3, {1, 1}, {1, 1}, {1, 1}, 1, true},
    {"3x5 stride (2, 1) pad (1, 2)", 2, 4, 10, 9, 6, 3, 5, {2, 1}, {1, 2}, {1, 1}, 1, true},
    {"64 channels (Tensor Core shapes)", 4, 64, 14, 14, 64, 3, 3, {1, 1}, {1, 1}, {1, 1}, 1, true},
};

// conv2d forward and all three gradients on the device against the CPU.
void check_conv(const ConvCase& k, DType dt, bool channels_last) {
  INFO(k.name << ", " << dtype_name(dt) << (channels_last ? ", channels-last" : ", NCHW"));
  manual_seed(11);
  auto x = leaves({k.N, k.C, k.H, k.W}, dt, channels_last);
  auto w = leaves({k.O, k.C / k.groups, k.kh, k.kw}, dt, false, 0.5);
  Pair2 b;
  if (k.bias) b = leaves({k.O}, dt);
  Tensor yc = conv2d(x.cpu, w.cpu, b.cpu, k.stride, k.padding, k.dilation, k.groups);
  Tensor yd = conv2d(x.dev, w.dev, b.dev, k.stride, k.padding, k.dilation, k.groups);
  const double tol = conv_tol(dt);
  expect_close(yd, yc, tol, "conv2d output");
  if (channels_last && k.C > 1) CHECK(yd.is_contiguous(MemoryFormat::ChannelsLast));
  Tensor gy = randn(yc.sizes()).to(dt);
  yc.backward(gy);
  yd.backward(gy.to(Device::cuda()));
  expect_close(x.dev.grad(), x.cpu.grad(), tol, "conv2d input grad");
  expect_close(w.dev.grad(), w.cpu.grad(), tol, "conv2d weight grad");
  if (k.bias) expect_close(b.dev.grad(), b.cpu.grad(), tol, "conv2d bias grad");
}

struct ConvTCase {
  const char* name;
  int64_t N, C, H, W, Og, kh, kw;
  Pair stride, padding, output_padding, dilation;
  int64_t groups;
  bool bias;
};

const std::vector<ConvTCase> kConvTCases = {
    {"stride 2 output_padding 1", 2, 4, 7, 9, 3, 3, 3, {2, 2}, {1, 1}, {1, 1}, {1, 1}, 1, true},
    {"groups 2 4x4", 1, 6, 5, 5, 2, 4, 4, {2, 2}, {1, 1}, {0, 0}, {1, 1}, 2, false},
    // output_padding >= stride (allowed below the dilation): the gradient's shape is padded.
    {"dilation 2 output_padding 1", 2, 3, 6, 6, 5, 3, 3, {1, 1}, {0, 0}, {1, 1}, {2, 2}, 1, true},
    {"1x1 batch 1", 1, 8, 5, 7, 4, 1, 1, {1, 1}, {0, 0}, {0, 0}, {1, 1}, 1, true},
};

void check_conv_transpose(const ConvTCase& k, DType dt, bool channels_last) {
  INFO(k.name << ", " << dtype_name(dt) << (channels_last ? ", channels-last" : ", NCHW"));
  manual_seed(12);
  auto x = leaves({k.N, k.C, k.H, k.W}, dt, channels_last);
  auto w = leaves({k.C, k.Og, k.kh, k.kw}, dt, false, 0.5);
  Pair2 b;
  if (k.bias) b = leaves({k.Og * k.groups}, dt);
  Tensor yc = conv_transpose2d(x.cpu, w.cpu, b.cpu, k.stride, k.padding, k.output_padding, k.groups, k.dilation);
  Tensor yd = conv_transpose2d(x.dev, w.dev, b.dev, k.stride, k.padding, k.output_padding, k.groups, k.dilation);
  const double tol = conv_tol(dt);
  expect_close(yd, yc, tol, "conv_transpose2d output");
  Tensor gy = randn(yc.sizes()).to(dt);
  yc.backward(gy);
  yd.backward(gy.to(Device::cuda()));
  expect_close(x.dev.grad(), x.cpu.grad(), tol, "conv_transpose2d input grad");
  expect_close(w.dev.grad(), w.cpu.grad(), tol, "conv_transpose2d weight grad");
  if (k.bias) expect_close(b.dev.grad(), b.cpu.grad(), tol, "conv_transpose2d bias grad");
}

// Restores the cuDNN switches however a test section ends.
struct SwitchGuard {
  bool bench = cuda::cudnn_benchmark_enabled(), det = cuda::cudnn_deterministic_enabled();
  SwitchGuard(bool b, bool d) {
    cuda::cudnn_benchmark(b);
    cuda::cudnn_deterministic(d);
  }
  ~SwitchGuard() {
    cuda::cudnn_benchmark(bench);
    cuda::cudnn_deterministic(det);
  }
};

bool has_cudnn_kernels() {
  if (dispatch::has_kernel(OpId::conv2d, DeviceType::kCUDA, kFloat32)) return true;
  WARN("skipped: mpx was built without cuDNN (" << cuda::cudnn_version() << ")");
  return false;
}

}  // namespace

TEST_CASE("cuda conv2d forward and backward match the CPU", "[cuda][conv]") {
  if (!cuda_ready() || !has_cudnn_kernels()) return;
  INFO(cuda::cudnn_version());
  for (DType dt : kTypes)
    for (bool cl : {false, true})
      for (const auto& k : kConvCases) check_conv(k, dt, cl);
}

TEST_CASE("cuda conv_transpose2d forward and backward match the CPU", "[cuda][conv]") {
  if (!cuda_ready() || !has_cudnn_kernels()) return;
  for (DType dt : kTypes)
    for (bool cl : {false, true})
      for (const auto& k : kConvTCases) check_conv_transpose(k, dt, cl);
}

TEST_CASE("cuda conv2d with mixed layouts and a 3-d input", "[cuda][conv]") {
  if (!cuda_ready() || !has_cudnn_kernels()) return;
  manual_seed(13);
  // Channels-last input with a contiguous upstream gradient: the weight gradient's operands
  // arrive in different layouts.
  auto x = leaves({2, 8, 9, 9}, kFloat32, true);
  auto w = leaves({6, 8, 3, 3}, kFloat32);
  Tensor yc = conv2d(x.cpu, w.cpu, {}, {1, 1}, {1, 1});
  Tensor yd = conv2d(x.dev, w.dev, {}, {1, 1}, {1, 1});
  Tensor gy = randn(yc.sizes());
  yc.backward(gy);
  yd.backward(gy.to(Device::cuda()));  // contiguous
  expect_close(x.dev.grad(), x.cpu.grad(), conv_tol(kFloat32), "input grad");
  expect_close(w.dev.grad(), w.cpu.grad(), conv_tol(kFloat32), "weight grad");
  // [C, H, W] input, and an input view that starts at an odd offset.
  Tensor x3 = randn({3, 10, 10}), w3 = randn({4, 3, 3, 3});
  expect_close(conv2d(x3.to(Device::cuda()), w3.to(Device::cuda())), conv2d(x3, w3), conv_tol(kFloat32), "3-d");
  Tensor big = randn({3 * 10 * 10 + 1});
  Tensor xo = big.narrow(0, 1, 300).view({1, 3, 10, 10});
  Tensor xod = big.to(Device::cuda()).narrow(0, 1, 300).view({1, 3, 10, 10});
  expect_close(conv2d(xod, w3.to(Device::cuda())), conv2d(xo, w3), conv_tol(kFloat32), "unaligned input");
}

TEST_CASE("cuda conv2d of an empty batch", "[cuda][conv]") {
  if (!cuda_ready() || !has_cudnn_kernels()) return;
  Tensor x = randn({0, 3, 8, 8}).to(Device::cuda()), w = randn({4, 3, 3, 3}).to(Device::cuda());
  Tensor y = conv2d(x, w, randn({4}).to(Device::cuda()));
  CHECK(y.sizes() == IntList{0, 4, 6, 6});
  Tensor t = conv_transpose2d(x, randn({3, 2, 3, 3}).to(Device::cuda()));
  CHECK(t.sizes() == IntList{0, 2, 10, 10});
}

TEST_CASE("cudnn benchmark and deterministic modes give the same results", "[cuda][conv]") {
  if (!cuda_ready() || !has_cudnn_kernels()) return;
  for (auto [bench, det] : {std::pair{true, false}, std::pair{false, true}, std::pair{true, true}}) {
    SwitchGuard guard(bench, det);
    INFO("benchmark " << bench << ", deterministic " << det);
    for (DType dt : {kFloat32, kFloat16})
      for (bool cl : {false, true}) {
        check_conv(kConvCases[1], dt, cl);
        check_conv(kConvCases[10], dt, cl);
        check_conv_transpose(kConvTCases[0], dt, cl);
      }
  }
  // Deterministic algorithms: the same weight gradient bit for bit, twice.
  SwitchGuard guard(false, true);
  manual_seed(14);
  Tensor x = randn({8, 32, 16, 16}).to(Device::cuda()).detach().set_requires_grad(true);
  Tensor w = randn({32, 32, 3, 3}).to(Device::cuda()).detach().set_requires_grad(true);
  Tensor gy = randn({8, 32, 16, 16}).to(Device::cuda());
  conv2d(x, w, {}, {1, 1}, {1, 1}).backward(gy);
  Tensor g1 = w.grad().clone(), x1 = x.grad().clone();
  w.grad().zero_();
  x.grad().zero_();
  conv2d(x, w, {}, {1, 1}, {1, 1}).backward(gy);
  CHECK(equal(w.grad().cpu(), g1.cpu()));
  CHECK(equal(x.grad().cpu(), x1.cpu()));
}

TEST_CASE("cuda conv2d errors name the shapes", "[cuda][conv]") {
  if (!cuda_ready() || !has_cudnn_kernels()) return;
  Tensor x = randn({1, 3, 8, 8}).to(Device::cuda()), w = randn({4, 5, 3, 3}).to(Device::cuda());
  const std::string e = error_of([&] { conv2d(x, w); });
  INFO(e);
  CHECK(e.find("conv2d") != std::string::npos);
  CHECK(e.find("3 channels") != std::string::npos);
  CHECK(e.find("[4, 5, 3, 3]") != std::string::npos);
  const std::string e2 = error_of([&] { conv2d(x, randn({4, 3, 3, 3})); });
  INFO(e2);
  CHECK(e2.find("conv2d") != std::string::npos);
  CHECK_FALSE(e2.empty());
  CHECK(cuda::cudnn_version().rfind("cuDNN ", 0) == 0);
}

namespace {
// batch_norm on both devices with running statistics; x.grad, weight/bias grads and the running
// stats compared. wdt: the dtype of weight, bias and running stats (f32 for f16/bf16 inputs,
// apex's keep_batchnorm_fp32).
void check_bn(const IntList& shape, DType dt, DType wdt, bool training, bool affine, bool channels_last) {
  INFO("batch_norm " << shape_str(shape) << " " << dtype_name(dt) << " (stats " << dtype_name(wdt) << "), "
                     << (training ? "training" : "eval") << (affine ? "" : ", affine=false")
                     << (channels_last ? ", channels-last" : ""));
  manual_seed(21);
  const int64_t C = shape[1];
  IntList cs(shape.size(), 1);
  cs[1] = C;
  // Scaled and shifted per channel, so that the statistics are not those of randn.
  auto x = leaves_of((randn(shape) * 2.0 + randn({C}).view(cs)).to(dt), channels_last);
  Pair2 w, b;
  if (affine) {
    w = leaves({C}, wdt);
    b = leaves({C}, wdt);
  }
  Tensor rm = randn({C}).to(wdt), rv = (rand({C}) + 0.5).to(wdt);
  Tensor rmd = rm.to(Device::cuda()), rvd = rv.to(Device::cuda());
  Tensor yc = batch_norm(x.cpu, rm, rv, w.cpu, b.cpu, training, 0.1, 1e-5);
  Tensor yd = batch_norm(x.dev, rmd, rvd, w.dev, b.dev, training, 0.1, 1e-5);
  const double tol = bn_tol(dt), stol = bn_tol(wdt);
  expect_close(yd, yc, tol, "batch_norm output");
  expect_close(rmd, rm, stol, "running_mean");
  expect_close(rvd, rv, stol, "running_var");
  Tensor gy = randn(yc.sizes()).to(dt);
  yc.backward(gy);
  yd.backward(gy.to(Device::cuda()));
  expect_close(x.dev.grad(), x.cpu.grad(), tol, "batch_norm input grad");
  if (affine) {
    expect_close(w.dev.grad(), w.cpu.grad(), stol, "batch_norm weight grad");
    expect_close(b.dev.grad(), b.cpu.grad(), stol, "batch_norm bias grad");
  }
}
}  // namespace

TEST_CASE("cuda batch_norm forward, running stats and backward match the CPU", "[cuda][norm]") {
  if (!cuda_ready() || !has_cudnn_kernels()) return;
  for (DType dt : kTypes) {
    const DType wdt = dt == kFloat64 ? kFloat64 : kFloat32;
    for (bool training : {true, false})
      for (bool cl : {false, true}) check_bn({4, 6, 9, 7}, dt, wdt, training, true, cl);
    check_bn({1, 5, 13, 11}, dt, wdt, true, false, false);  // batch 1, affine=false
    check_bn({8, 5, 13}, dt, wdt, true, true, false);       // BatchNorm1d over [N, C, L]
    check_bn({16, 5}, dt, wdt, true, true, false);          // and over [N, C]
    check_bn({2, 3, 5, 5}, dt, wdt, false, false, false);
  }
  // f16 activations with f16 parameters (no keep_batchnorm_fp32).
  check_bn({4, 6, 9, 7}, kFloat16, kFloat16, true, true, true);
  // A larger batch (f32 statistics over 128k values per channel).
  check_bn({32, 4, 64, 64}, kFloat32, kFloat32, true, true, false);
  // Training without running statistics (track_running_stats=false): cuDNN is given none to update,
  // on its classic kernels (f32, row-major) and its persistent NHWC ones (f16, channels-last).
  for (DType dt : {kFloat32, kFloat16}) {
    manual_seed(22);
    Tensor x = randn({4, 6, 9, 7}).to(dt);
    if (dt == kFloat16) x = x.contiguous(MemoryFormat::ChannelsLast);
    const Tensor yc = batch_norm(x, Tensor(), Tensor(), Tensor(), Tensor(), true, 0.1, 1e-5);
    const Tensor yd = batch_norm(x.to(Device::cuda()), Tensor(), Tensor(), Tensor(), Tensor(), true, 0.1, 1e-5);
    expect_close(yd, yc, bn_tol(dt), "batch_norm output without running statistics");
  }
}

namespace {
// batch_norm_add_relu (add) or batch_norm_relu on both devices: y, running statistics and the
// x, z, weight, bias grads. The ReLU's kink makes elements near 0 flip between devices; gy is
// zeroed there.
void check_fused_bn(bool add, DType dt, bool training, bool channels_last) {
  INFO((add ? "batch_norm_add_relu " : "batch_norm_relu ")
       << dtype_name(dt) << (training ? " training" : " eval") << (channels_last ? ", channels-last" : ""));
  manual_seed(22);
  const DType wdt = dt == kFloat64 ? kFloat64 : kFloat32;
  const IntList shape{8, 16, 7, 9};  // C % 8 == 0: what cuDNN's fused NHWC kernels want
  auto x = leaves_of((randn(shape) * 2.0 + 0.5).to(dt), channels_last);
  auto z = leaves_of(randn(shape).to(dt), channels_last);
  Pair2 w = leaves({16}, wdt), b = leaves({16}, wdt);
  Tensor rm = randn({16}).to(wdt), rv = (rand({16}) + 0.5).to(wdt);
  Tensor rmd = rm.to(Device::cuda()), rvd = rv.to(Device::cuda());
  Tensor yc = add ? batch_norm_add_relu(x.cpu, z.cpu, rm, rv, w.cpu, b.cpu, training, 0.1, 1e-5)
                  : batch_norm_relu(x.cpu, rm, rv, w.cpu, b.cpu, training, 0.1, 1e-5);
  Tensor yd = add ? batch_norm_add_relu(x.dev, z.dev, rmd, rvd, w.dev, b.dev, training, 0.1, 1e-5)
                  : batch_norm_relu(x.dev, rmd, rvd, w.dev, b.dev, training, 0.1, 1e-5);
  const double tol = bn_tol(dt), stol = bn_tol(wdt);
  CHECK(yd.is_contiguous(channels_last ? MemoryFormat::ChannelsLast : MemoryFormat::Contiguous));
  expect_close(yd, yc, tol, "output");
  expect_close(rmd, rm, stol, "running_mean");
  expect_close(rvd, rv, stol, "running_var");
  Tensor gy = randn(yc.sizes()).to(dt) * gt(abs(yc.detach().to(kFloat32)), 0.05).to(dt);
  yc.backward(gy);
  yd.backward(gy.to(Device::cuda()));
  expect_close(x.dev.grad(), x.cpu.grad(), tol, "input grad");
  if (add) expect_close(z.dev.grad(), z.cpu.grad(), tol, "residual grad");
  expect_close(w.dev.grad(), w.cpu.grad(), stol, "weight grad");
  expect_close(b.dev.grad(), b.cpu.grad(), stol, "bias grad");
}
}  // namespace

TEST_CASE("cuda batch_norm_add_relu and batch_norm_relu match the CPU in every dtype and layout", "[cuda][norm]") {
  if (!cuda_ready() || !has_cudnn_kernels()) return;
  for (bool add : {true, false})
    for (DType dt : kTypes)
      for (bool training : {true, false})
        for (bool cl : {false, true}) check_fused_bn(add, dt, training, cl);
}

TEST_CASE("a ResNet-18 SGD step on the GPU matches the CPU", "[cuda][conv][models]") {
  if (!cuda_ready() || !has_cudnn_kernels()) return;
  if (!dispatch::has_kernel(OpId::max_pool2d, DeviceType::kCUDA, kFloat32) ||
      !dispatch::has_kernel(OpId::adaptive_avg_pool2d, DeviceType::kCUDA, kFloat32)) {
    WARN("skipped: no CUDA pooling kernels yet");
    return;
  }
  const auto opts = models::ModelOptions().num_classes(10).in_channels(1).small_input(true);
  manual_seed(5);
  auto cpu = models::create("resnet18", opts);
  manual_seed(5);
  auto gpu = models::create("resnet18", opts);
  gpu.ptr()->to(Device::cuda());
  optim::SGD oc(cpu.ptr()->parameters(), optim::SGDOptions(0.1).momentum(0.9));
  optim::SGD og(gpu.ptr()->parameters(), optim::SGDOptions(0.1).momentum(0.9));
  manual_seed(6);
  Tensor x = randn({4, 1, 28, 28});
  Tensor y = randint(0, 10, {4});
  Tensor lc = nn::functional::cross_entropy(cpu(x), y);
  Tensor lg = nn::functional::cross_entropy(gpu(x.to(Device::cuda())), y.to(Device::cuda()));
  // Twenty layers of f32 convolutions (FFT/Winograd among them) and batch norms.
  expect_close(lg, lc, 1e-4, "loss");
  lc.backward();
  lg.backward();
  const auto pc = cpu.ptr()->named_parameters(), pg = gpu.ptr()->named_parameters();
  // Gradients: measured 2.6e-3 to 4.9e-3 relative on an H100 (2026-11-23), while the CPU's f32
  // and f64 runs of this step agree to 1.4e-6: the gap most likely comes from the f32 algorithms cuDNN's heuristic
  // picks for the backward passes (Winograd/FFT variants, as PyTorch gets with
  // cudnn.benchmark off), not the network's conditioning. The isolated convolutions above
  // meet 1e-4; pinning algorithms per shape is the way to tighten this.
  for (const auto& it : pc) expect_close(pg[it.key()].grad(), it.value().grad(), 1e-2, it.key() + " grad");
  oc.step();
  og.step();
  // A step moves a parameter by lr * grad; batch-norm biases start at zero, so theirs carry the
  // gradients' full relative error. The running statistics come from the forward (~1e-5..1e-4).
  for (const auto& it : pc) expect_close(pg[it.key()], it.value(), 1e-2, it.key() + " after one step");
  const auto bc = cpu.ptr()->named_buffers(), bg = gpu.ptr()->named_buffers();
  for (const auto& it : bc) {
    if (!is_floating(it.value().dtype())) continue;
    expect_close(bg[it.key()], it.value(), 1e-4, it.key());
  }
}
