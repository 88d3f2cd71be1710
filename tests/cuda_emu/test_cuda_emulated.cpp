// CUDA kernel files compiled for the host (hostify.cpp, device_runtime.h) and run on CPU fibers in place of the CPU
// kernels: the backend sweep, the index, loss, norm, RNN-cell, attention, optimizer, resampling and padding families
// must give the CPU's results.
#include <catch2/catch.hpp>

#include <cstdlib>
#include <functional>
#include <string>
#include <tuple>
#include <vector>

#include "amp/grad_scaler.h"
#include "autograd/engine.h"
#include "backend_cases.h"
#include "core/cuda.h"
#include "core/random.h"
#include "ops/attention.h"
#include "ops/cuda/sdpa_cudnn.h"
#include "ops/dispatch.h"
#include "ops/elementwise.h"
#include "ops/index.h"
#include "ops/loss.h"
#include "ops/norm.h"
#include "ops/pad.h"
#include "ops/reduction.h"
#include "ops/resize.h"
#include "ops/rnn.h"
#include "optim/adagrad.h"
#include "optim/adam.h"
#include "optim/lamb.h"
#include "optim/rmsprop.h"
#include "optim/sgd.h"
#include "test_util.h"

using namespace mpx;

namespace {

// The CUDA kernels registered by this binary serve CPU tensors here; the real CUDA module must stay unloaded.
const bool cuda_module_off = [] { return setenv("MPX_DISABLE_CUDA", "1", 1) == 0; }();

/// While alive, every CPU kernel of `ops` that has a CUDA kernel is that CUDA kernel (run on host fibers).
class CudaKernelsOnCpu {
 public:
  CudaKernelsOnCpu(std::initializer_list<OpId> ops) {
    REQUIRE(cuda_module_off);
    for (OpId op : ops)
      for (int d = 0; d < kNumDTypes; ++d) {
        const DType dt = static_cast<DType>(d);
        if (!dispatch::has_kernel(op, DeviceType::kCUDA, dt)) continue;
        const bool cpu = dispatch::has_kernel(op, DeviceType::kCPU, dt);
        saved_.emplace_back(op, dt, cpu ? dispatch::find_kernel(op, DeviceType::kCPU, dt) : nullptr);
        dispatch::detail::register_raw(op, DeviceType::kCPU, dt, dispatch::find_kernel(op, DeviceType::kCUDA, dt));
      }
    REQUIRE(!saved_.empty());
  }
  ~CudaKernelsOnCpu() {
    for (auto& [op, dt, fn] : saved_) dispatch::detail::register_raw(op, DeviceType::kCPU, dt, fn);
  }
  CudaKernelsOnCpu(const CudaKernelsOnCpu&) = delete;
  CudaKernelsOnCpu& operator=(const CudaKernelsOnCpu&) = delete;

 private:
  std::vector<std::tuple<OpId, DType, void*>> saved_;
};

/// f() with the CPU kernels, then with the CUDA ones.
tensor_list both(std::initializer_list<OpId> ops, const std::function<tensor_list()>& f, tensor_list& cuda) {
  manual_seed(5);
  tensor_list cpu = f();
  {
    CudaKernelsOnCpu swap(ops);
    manual_seed(5);
    cuda = f();
  }
  return cpu;
}

void check_same(const tensor_list& cpu, const tensor_list& cuda, const std::string& what) {
  REQUIRE(cpu.size() == cuda.size());
  for (size_t i = 0; i < cpu.size(); ++i) {
    INFO(what << " result " << i << " " << dtype_name(cpu[i].dtype()) << " " << shape_str(cpu[i].sizes()));
    CHECK(testing::same_values(cuda[i], cpu[i]));
  }
}

void check_close(const tensor_list& cpu, const tensor_list& cuda, const std::string& what, double tol) {
  REQUIRE(cpu.size() == cuda.size());
  for (size_t i = 0; i < cpu.size(); ++i) {
    const double e = testing::rel_err(cuda[i], cpu[i]);
    INFO(what << " result " << i << " " << dtype_name(cpu[i].dtype()) << " rel_err " << e);
    CHECK(e < tol);
  }
}

Tensor rnd(const IntList& shape, DType dt, uint64_t seed) {
  manual_seed(seed);
  return randn(shape, TensorOptions(kFloat64)).to(dt);
}
Tensor idx(std::vector<int64_t> v) {
  Tensor t = empty({static_cast<int64_t>(v.size())}, TensorOptions(kInt64));
  for (size_t i = 0; i < v.size(); ++i) t.data_ptr<int64_t>()[i] = v[i];
  return t;
}

double tolerance(DType dt) {
  return dt == kFloat64 ? 1e-12 : dt == kFloat32 ? 1e-5 : dt == kFloat16 ? 2e-3 : 1e-2;
}

}  // namespace

TEST_CASE("emulated CUDA index kernels give the CPU's values", "[emulated][index]") {
  const std::initializer_list<OpId> ops = {OpId::index_select, OpId::index_add, OpId::gather, OpId::scatter,
                                          OpId::scatter_add,  OpId::masked_fill, OpId::tril,  OpId::triu,
                                          OpId::topk, OpId::sort};
  for (DType dt : {kFloat32, kFloat16, kBFloat16, kFloat64, kInt64}) {
    INFO(dtype_name(dt));
    const Tensor x = dt == kInt64 ? (rnd({3, 5, 4}, kFloat64, 1) * 10.0).to(kInt64) : rnd({3, 5, 4}, dt, 1);
    const Tensor xt = x.transpose(0, 2);  // strided input
    tensor_list cuda;
    const tensor_list cpu = both(ops, [&] {
      const Tensor i1 = idx({4, 0, 2, 2});
      // gather/scatter indices along dim 1, with repeats
      const Tensor g = (rnd({3, 2, 4}, kFloat64, 2).abs() * 2.0).to(kInt64).clamp(0, 4);
      const Tensor mask = gt(rnd({5, 1}, kFloat64, 3), 0.0);
      tensor_list r = {index_select(x, 1, i1), index_select(xt, 2, idx({1, 0})), gather(x, 1, g),
                       gather(xt, 0, zeros({2, 5, 3}, kInt64)), masked_fill(x, mask, -2.0), tril(x, 1), triu(xt, -1)};
      const Tensor rows = idx({0, 1, 2, 3, 4}).reshape({1, 5, 1}).expand({3, 5, 4}).contiguous();
      r.push_back(scatter(zeros({3, 5, 4}, dt), 1, rows, x));
      r.push_back(scatter_add(zeros({3, 5, 4}, dt), 1, g, x.narrow(1, 0, 2).contiguous()));
      r.push_back(index_add(zeros({3, 6, 4}, dt), 1, idx({5, 0, 5, 1, 2}), x, dt == kInt64 ? 2.0 : 0.5));
      auto [v, i] = topk(x, 3, 1, true, true);
      auto [v2, i2] = topk(xt, 2, -1, false, true);
      r.insert(r.end(), {v, i, v2, i2});
      // sort: lanes of 5 (padded to 8) along dim 1 and of 3 (padded to 4) along the strided last dim; ties in i64.
      auto [s1, si1] = sort(x, 1, true);
      auto [s2, si2] = sort(xt, -1);
      auto [s3, si3] = sort(dt == kInt64 ? (rnd({2, 300}, kFloat64, 4) * 3.0).to(kInt64) : rnd({2, 300}, dt, 4), 1);
      r.insert(r.end(), {s1, si1, s2, si2, s3, si3});
      return r;
    }, cuda);
    // Sums of atomics may land in another order: the f16/bf16/f32 scatter_add and index_add rows within rounding.
    for (size_t n = 0; n < cpu.size(); ++n) {
      const bool summed = n == 8 || n == 9;
      INFO("result " << n);
      if (summed && is_floating(dt)) CHECK(testing::rel_err(cuda[n], cpu[n]) < tolerance(dt));
      else CHECK(testing::same_values(cuda[n], cpu[n]));
    }
  }
}

TEST_CASE("emulated CUDA embedding forward and backward give the CPU's values", "[emulated][index]") {
  const std::initializer_list<OpId> ops = {OpId::embedding, OpId::embedding_backward};
  for (DType dt : {kFloat32, kFloat16, kBFloat16, kFloat64})
    for (bool deterministic : {false, true})
      for (int64_t padding : {int64_t{-1}, int64_t{3}}) {
        INFO(dtype_name(dt) << " deterministic " << deterministic << " padding_idx " << padding);
        const Tensor w0 = rnd({7, 5}, dt, 1);
        const Tensor ind = idx({3, 1, 6, 1, 1, 0, 3, 2, 6, 1, 5, 0}).reshape({3, 4});
        const Tensor up = rnd({3, 4, 5}, dt, 2);
        tensor_list cuda;
        const tensor_list cpu = both(ops, [&] {
          const Tensor w = w0.detach().set_requires_grad(true);
          const Tensor out = embedding(w, ind, padding, deterministic);
          return tensor_list{out.detach(), autograd::grad({sum(out * up)}, {w})[0]};
        }, cuda);
        CHECK(testing::same_values(cuda[0], cpu[0]));
        // Deterministic sums run in index order, as the CPU's; atomics in any order.
        if (deterministic || dt == kFloat64) CHECK(testing::rel_err(cuda[1], cpu[1]) < (dt == kFloat64 ? 1e-15 : 1e-7));
        else CHECK(testing::rel_err(cuda[1], cpu[1]) < tolerance(dt));
      }
}

TEST_CASE("emulated CUDA multinomial draws the CPU's samples", "[emulated][index]") {
  for (DType dt : {kFloat32, kBFloat16, kFloat64})
    for (bool replacement : {false, true}) {
      INFO(dtype_name(dt) << " replacement " << replacement);
      const Tensor p = rnd({4, 9}, kFloat64, 3).abs().to(dt);
      tensor_list cuda;
      const tensor_list cpu =
          both({OpId::multinomial}, [&] { return tensor_list{multinomial(p, 5, replacement)}; }, cuda);
      check_same(cpu, cuda, "multinomial");
    }
}

TEST_CASE("emulated CUDA cross-entropy rows at GPT-2's vocabulary give the CPU's values", "[emulated][loss]") {
  // 50,257 classes: the forward splits each row across blocks, the backward takes several chunks a row.
  const std::initializer_list<OpId> ops = {OpId::cross_entropy_rows, OpId::cross_entropy_rows_backward};
  for (DType dt : {kFloat32, kBFloat16})
    for (double eps : {0.0, 0.1}) {
      INFO(dtype_name(dt) << " label smoothing " << eps);
      const Tensor x0 = rnd({3, 50257}, dt, 4);
      const Tensor t = idx({50256, -100, 17});
      const Tensor up = rnd({3}, kFloat32, 6);
      tensor_list cuda;
      const tensor_list cpu = both(ops, [&] {
        const Tensor x = x0.clone().set_requires_grad(true);
        const Tensor l = cross_entropy(x, t, Reduction::None, -100, eps);
        return tensor_list{l.detach(), autograd::grad({sum(l * up)}, {x})[0]};
      }, cuda);
      check_close(cpu, cuda, "cross_entropy", tolerance(dt));
      CHECK(cuda[1].dtype() == dt);
    }
}

TEST_CASE("emulated CUDA cumsum and cumprod (a thread per lane, a block per long row) give the CPU's values", "[emulated][reduction]") {
  for (DType dt : {kFloat32, kBFloat16, kFloat64, kInt64}) {
    INFO(dtype_name(dt));
    const Tensor x = dt == kInt64 ? (rnd({3, 1000}, kFloat64, 1) * 10.0).to(kInt64) : rnd({3, 1000}, dt, 1);
    tensor_list cuda;
    const tensor_list cpu = both({OpId::cumsum}, [&] {
      const Tensor leaf = x.detach().set_requires_grad(is_floating(dt));
      const Tensor rows = cumsum(leaf, 1), cols = cumsum(x.t(), 1);  // a block per row; a thread per lane
      tensor_list r = {rows.detach(), cols};
      if (is_floating(dt)) r.push_back(autograd::grad({sum(rows * rows.detach())}, {leaf})[0]);  // reversed rows
      return r;
    }, cuda);
    // The block scan adds in another order than the CPU's f64 running sum: equal for integers, close for floats.
    if (dt == kInt64) check_same(cpu, cuda, "cumsum");
    else check_close(cpu, cuda, "cumsum", dt == kFloat64 ? 1e-12 : tolerance(dt));
  }
  // cumprod on the same kernels: factors near 1 keep long products finite; integers of -1, 1 and 2 (a few 2s).
  for (DType dt : {kFloat32, kBFloat16, kFloat64, kInt64}) {
    INFO("cumprod " << dtype_name(dt));
    const Tensor x = dt == kInt64 ? (rnd({3, 1000}, kFloat64, 2) * 0.6).round().clamp(-1, 2).to(kInt64)
                                  : (rnd({3, 1000}, kFloat64, 2) * 0.05 + 1.0).to(dt);
    tensor_list cuda;
    const tensor_list cpu = both({OpId::cumprod, OpId::cumsum}, [&] {
      const Tensor leaf = x.detach().set_requires_grad(is_floating(dt));
      const Tensor rows = cumprod(leaf, 1), cols = cumprod(x.t(), 1);
      tensor_list r = {rows.detach(), cols};
      if (is_floating(dt)) r.push_back(autograd::grad({sum(rows * rows.detach())}, {leaf})[0]);
      return r;
    }, cuda);
    if (dt == kInt64) check_same(cpu, cuda, "cumprod");
    else check_close(cpu, cuda, "cumprod", dt == kFloat64 ? 1e-12 : tolerance(dt));
  }
}

TEST_CASE("emulated CUDA row norms give the CPU's values", "[emulated][norm]") {
  const std::initializer_list<OpId> ops = {OpId::layer_norm_fwd, OpId::layer_norm_bwd, OpId::rms_norm_fwd,
                                          OpId::rms_norm_bwd};
  for (DType dt : {kFloat32, kFloat16, kBFloat16, kFloat64})
    for (int64_t D : {int64_t{7}, int64_t{300}}) {  // fewer columns than threads, and more
      INFO(dtype_name(dt) << " D " << D);
      // 40 rows: two tiles of the parameter gradients' sums.
      const Tensor x0 = (rnd({40, D}, kFloat64, 1) + 3.0).to(dt);
      const Tensor up = rnd({40, D}, dt, 2);
      const DType st = dt == kFloat64 ? kFloat64 : kFloat32;
      const Tensor w0 = rnd({D}, st, 3), b0 = rnd({D}, st, 4);
      tensor_list cuda;
      const tensor_list cpu = both(ops, [&] {
        const Tensor x = x0.detach().set_requires_grad(true), w = w0.detach().set_requires_grad(true),
                     b = b0.detach().set_requires_grad(true);
        const Tensor y = layer_norm(x, {D}, w, b), z = rms_norm(x, {D}, w);
        tensor_list r = {y.detach(), z.detach()};
        for (const Tensor& g : autograd::grad({sum(y * up) + sum(z * up)}, {x, w, b})) r.push_back(g);
        return r;
      }, cuda);
      check_close(cpu, cuda, "layer_norm/rms_norm", tolerance(dt));
    }
}

TEST_CASE("emulated CUDA LSTM and GRU cells give the CPU's values", "[emulated][rnn]") {
  const std::initializer_list<OpId> ops = {OpId::lstm_cell_fused, OpId::lstm_cell_fused_backward, OpId::gru_cell_fused,
                                          OpId::gru_cell_fused_backward};
  for (DType dt : {kFloat32, kFloat16, kBFloat16, kFloat64}) {
    INFO(dtype_name(dt));
    const int64_t N = 5, Hd = 11;
    const Tensor gates0 = rnd({N, 4 * Hd}, dt, 1), c0 = rnd({N, Hd}, dt, 2);
    const Tensor gi0 = rnd({N, 3 * Hd}, dt, 3), gh0 = rnd({N, 3 * Hd}, dt, 4), h0 = rnd({N, Hd}, dt, 5);
    const Tensor u1 = rnd({N, Hd}, dt, 6), u2 = rnd({N, Hd}, dt, 7);
    tensor_list cuda;
    const tensor_list cpu = both(ops, [&] {
      const Tensor gates = gates0.detach().set_requires_grad(true), c = c0.detach().set_requires_grad(true);
      const Tensor gi = gi0.detach().set_requires_grad(true), gh = gh0.detach().set_requires_grad(true),
                   h = h0.detach().set_requires_grad(true);
      auto [hn, cn] = lstm_cell_fused(gates, c);
      const Tensor hg = gru_cell_fused(gi, gh, h);
      tensor_list r = {hn.detach(), cn.detach(), hg.detach()};
      for (const Tensor& g : autograd::grad({sum(hn * u1) + sum(cn * u2) + sum(hg * u1)}, {gates, c, gi, gh, h}))
        r.push_back(g);
      return r;
    }, cuda);
    check_close(cpu, cuda, "lstm/gru cells", tolerance(dt));
  }
}

// f16/bf16 with head dims up to 128 run the flash kernels through their launcher (the host plays an sm_90 device);
// f32, f64 and wider heads the row-per-thread kernels.
TEST_CASE("emulated CUDA attention (flash and row-per-thread kernels) gives the CPU's values",
          "[emulated][attention]") {
  const std::initializer_list<OpId> ops = {OpId::sdpa_fused, OpId::sdpa_fused_backward};
  struct Case {
    const char* name;
    int64_t B, H, Hk, L, S, E, Ev;
    bool causal = false, bool_mask = false;
    double dropout = 0.0;
  };
  const Case cases[] = {
      {"no mask", 2, 3, 3, 37, 45, 16, 24},
      {"causal L > S", 1, 2, 2, 90, 33, 8, 12, true},
      {"bool mask", 2, 2, 2, 40, 67, 8, 8, false, true},
      {"GQA, dropout", 1, 4, 2, 35, 35, 64, 64, true, false, 0.25},
      {"head dims 100 and 72", 1, 1, 1, 20, 30, 100, 72},
      {"head dims 160 and 136 (wider than flash)", 1, 2, 2, 40, 70, 160, 136, true},
  };
  for (const Case& c : cases)
    for (DType dt : {kFloat32, kFloat64, kFloat16, kBFloat16}) {
      INFO(c.name << " " << dtype_name(dt));
      const Tensor q0 = rnd({c.B, c.H, c.L, c.E}, dt, 1), k0 = rnd({c.B, c.Hk, c.S, c.E}, dt, 2);
      const Tensor v0 = rnd({c.B, c.Hk, c.S, c.Ev}, dt, 3), w = rnd({c.B, c.H, c.L, c.Ev}, dt, 4);
      const Tensor mask = c.bool_mask ? gt(rnd({c.L, c.S}, kFloat64, 5), -0.8) : Tensor();
      tensor_list cuda;
      const tensor_list cpu = both(ops, [&] {
        const Tensor q = q0.detach().set_requires_grad(true), k = k0.detach().set_requires_grad(true),
                     v = v0.detach().set_requires_grad(true);
        const Tensor out = scaled_dot_product_attention(q, k, v, mask, c.dropout, c.causal, std::nullopt, c.Hk != c.H);
        tensor_list r = {out.detach()};
        for (const Tensor& g : autograd::grad({sum(out * w)}, {q, k, v})) r.push_back(g);
        return r;
      }, cuda);
      check_close(cpu, cuda, "sdpa", dt == kFloat16 ? 4e-3 : tolerance(dt));
    }
}

// Generation's calls: one or a few queries on keys and values that are the first rows of a larger key/value cache
// buffer (row stride the head dim, head stride the cache's length), with the mask that aligns a chunk to its positions.
TEST_CASE("emulated CUDA attention on a key/value cache's views gives the CPU's values", "[emulated][attention]") {
  for (DType dt : {kFloat32, kFloat16, kBFloat16}) {
    for (int64_t L : {1, 3}) {
      INFO(dtype_name(dt) << " L " << L);
      const Tensor K = rnd({2, 4, 96, 64}, dt, 1), V = rnd({2, 4, 96, 64}, dt, 2), q = rnd({2, 4, L, 64}, dt, 3);
      const int64_t S = 70;
      const Tensor mask = L > 1 ? tril(ones({L, S}, TensorOptions(kBool)), S - L) : Tensor();
      tensor_list cuda;
      const tensor_list cpu = both({OpId::sdpa_fused}, [&] {
        NoGradGuard ng;
        return tensor_list{scaled_dot_product_attention(q, K.narrow(2, 0, S), V.narrow(2, 0, S), mask)};
      }, cuda);
      check_close(cpu, cuda, "sdpa on a cache", dt == kFloat16 ? 4e-3 : tolerance(dt));
    }
  }
}

// With the flash kernels switched off (cuda::enable_flash_sdp), f16/bf16 calls run the row kernels.
TEST_CASE("emulated CUDA attention with the flash kernels off gives the CPU's values", "[emulated][attention]") {
  const bool was = cuda::flash_sdp_enabled();
  cuda::enable_flash_sdp(false);
  for (DType dt : {kFloat16, kBFloat16}) {
    INFO(dtype_name(dt));
    const Tensor q0 = rnd({1, 4, 35, 64}, dt, 1), k0 = rnd({1, 2, 35, 64}, dt, 2), v0 = rnd({1, 2, 35, 64}, dt, 3);
    const Tensor w = rnd({1, 4, 35, 64}, dt, 4);
    tensor_list cuda;
    const tensor_list cpu = both({OpId::sdpa_fused, OpId::sdpa_fused_backward}, [&] {
      const Tensor q = q0.detach().set_requires_grad(true), k = k0.detach().set_requires_grad(true),
                   v = v0.detach().set_requires_grad(true);
      const Tensor out = scaled_dot_product_attention(q, k, v, {}, 0.25, true, std::nullopt, true);
      tensor_list r = {out.detach()};
      for (const Tensor& g : autograd::grad({sum(out * w)}, {q, k, v})) r.push_back(g);
      return r;
    }, cuda);
    check_close(cpu, cuda, "sdpa (row kernels)", dt == kFloat16 ? 4e-3 : tolerance(dt));
  }
  cuda::enable_flash_sdp(was);
}

// Which calls attention.cpp offers cuDNN's fused attention: the rule alone, no cuDNN needed.
TEST_CASE("cuDNN's fused attention is offered f16/bf16 calls without mask or dropout, aligned",
          "[emulated][attention]") {
  cuda::SdpaGeom g;
  g.B = 2, g.H = 4, g.Hk = 2, g.L = 129, g.S = 129, g.E = 64, g.Ev = 64;
  // GPT-2's split heads of a [B, T, 3C] projection: strides (T * 3C, E, 3C, 1).
  const int64_t C3 = 3 * g.H * g.E;
  for (int64_t* st : {g.sq, g.sk, g.sv}) st[0] = g.L * C3, st[1] = g.E, st[2] = C3, st[3] = 1;
  alignas(16) static char buf[64];
  const std::initializer_list<const void*> aligned = {buf, buf + 16};
  CHECK(cuda::sdpa_cudnn_refusal(kFloat16, g, false, aligned) == nullptr);
  CHECK(cuda::sdpa_cudnn_refusal(kBFloat16, g, false, aligned) == nullptr);
  CHECK(std::string(cuda::sdpa_cudnn_refusal(kFloat32, g, false, aligned)) == "not f16/bf16");
  CHECK(std::string(cuda::sdpa_cudnn_refusal(kFloat16, g, true, aligned)) == "a mask");
  CHECK(std::string(cuda::sdpa_cudnn_refusal(kFloat16, g, false, {buf, buf + 8})) == "an address not 16-byte aligned");
  cuda::SdpaGeom d = g;
  d.dropout_p = 0.1;
  CHECK(std::string(cuda::sdpa_cudnn_refusal(kFloat16, d, false, aligned)) == "dropout");
  d = g;
  d.E = 36;
  CHECK(std::string(cuda::sdpa_cudnn_refusal(kFloat16, d, false, aligned)) == "head dims not a multiple of 8");
  d = g;
  d.sk[2] = 100;  // rows 200 bytes apart
  CHECK(std::string(cuda::sdpa_cudnn_refusal(kFloat16, d, false, aligned)) == "strides not multiples of 8 elements");
  d = g;
  d.B = 1, d.sq[0] = 3;  // a size-1 dim's stride is never read
  CHECK(cuda::sdpa_cudnn_refusal(kFloat16, d, false, aligned) == nullptr);
  d = g;
  d.sv[3] = 2;
  CHECK(std::string(cuda::sdpa_cudnn_refusal(kFloat16, d, false, aligned)) == "a last stride other than 1");
  d = g;
  d.S = 0;
  CHECK(std::string(cuda::sdpa_cudnn_refusal(kFloat16, d, false, aligned)) == "empty");
}

// The backend sweep's cases (tests/backend_cases.h) for every op whose CUDA kernel this binary holds: each op's
// CUDA kernel alone in place of its CPU kernel, against the CPU kernel, within the [cuda] sweep's tolerances.
TEST_CASE("every CUDA kernel built for the host agrees with the CPU kernel (backend sweep)", "[emulated][backend]") {
  namespace sweep = backend_sweep;
  const auto runs = sweep::formula_runs();
  const auto cases = sweep::kernel_cases();
  const Device cpu = Device::cpu();
  int swept = 0;
  for (int i = 0; i < kNumOps; ++i) {
    const OpId op = static_cast<OpId>(i);
    const std::string name = op_name(op);
    if (is_composite(op)) continue;
    for (DType dt : sweep::kDTypes) {
      if (!dispatch::has_kernel(op, DeviceType::kCUDA, dt)) continue;
      INFO(name << " " << dtype_name(dt));
      tensor_list got, ref;
      if (auto f = runs.find(name); f != runs.end()) {
        ref = f->second(dt, dt, cpu);
        CudaKernelsOnCpu swap({op});
        got = f->second(dt, dt, cpu);
      } else if (auto c = cases.find(name); c != cases.end()) {
        if (!is_floating(dt)) continue;
        sweep::Sample r{dt, dt, cpu}, s{dt, dt, cpu};
        ref = c->second(r);
        CudaKernelsOnCpu swap({op});
        got = c->second(s);
      } else {
        continue;
      }
      sweep::check_outputs(got, ref, 2.0);
      ++swept;
    }
  }
  INFO("(op, dtype) pairs swept: " << swept);
  CHECK(swept > 200);
}

namespace {
// Parameters (sizes beside and across the kernels' chunking) and three steps of gradients, one inf-free.
std::vector<Tensor> step_params(DType dt) {
  std::vector<Tensor> ps;
  for (int64_t n : {int64_t{7}, int64_t{1000}, int64_t{4099}})
    ps.push_back(rnd({n}, dt, 40 + static_cast<uint64_t>(n)).set_requires_grad(true));
  return ps;
}
// Gradients of about 0.01, times `scale` (a loss scaler's, which the step divides out again).
void step_grads(const std::vector<Tensor>& ps, int step, double scale = 1.0) {
  for (const Tensor& p : ps) p.set_grad((rnd(p.sizes(), kFloat64, 100 + step) * (0.01 * scale)).to(p.dtype()));
}
}  // namespace

TEST_CASE("emulated CUDA optimizer steps (SGD, AdamW, RMSprop, Adagrad, LAMB) and loss-scale kernels give the CPU's values",
          "[emulated][optim]") {
  const std::initializer_list<OpId> ops = {OpId::sgd_step, OpId::adam_step, OpId::unscale_check_inf,
                                          OpId::update_scale};
  for (DType dt : {kFloat32, kBFloat16, kFloat16}) {
    INFO(dtype_name(dt));
    tensor_list cuda;
    const tensor_list cpu = both(ops, [&] {
      tensor_list r;
      // SGD with momentum, Nesterov and weight decay; AdamW with amsgrad: f32 masters for f16/bf16 models.
      auto sgd_ps = step_params(dt), adam_ps = step_params(dt);
      optim::SGD sgd(sgd_ps, optim::SGDOptions(0.05).momentum(0.9).nesterov(true).weight_decay(1e-2));
      optim::AdamW adam(adam_ps, optim::AdamWOptions(1e-2).amsgrad(true));
      // The loss scaler's unscale and update around each step; step 1 has an inf gradient and is skipped.
      amp::GradScaler scaler;
      for (int s = 0; s < 3; ++s) {
        step_grads(sgd_ps, s);
        step_grads(adam_ps, s);
        if (s == 1) adam_ps[1].grad().select(0, 3).fill_(INFINITY);
        sgd.step();
        scaler.step(adam);
        scaler.update();
      }
      for (const Tensor& p : sgd_ps) r.push_back(p.detach());
      for (const Tensor& p : adam_ps) r.push_back(p.detach());
      r.push_back(full({}, scaler.get_scale(), TensorOptions(kFloat64)));
      r.push_back(full({}, static_cast<double>(scaler.skipped_steps()), TensorOptions(kFloat64)));
      return r;
    }, cuda);
    CHECK(cpu.back().item<double>() == 1.0);  // the inf step was skipped
    // f32 arithmetic in another order (fused multiply-adds, sqrt): within a few f32 ulps, rounded once to dt.
    check_close(cpu, cuda, "sgd/adamw with a grad scaler", dt == kFloat32 ? 1e-6 : tolerance(dt) / 4);
  }
  // RMSprop (centered, momentum) and Adagrad (decayed rate, start value) under the scaler, whose skipped step
  // leaves Adagrad's sum to start at its initial value; then without masters, state in the parameter's dtype.
  const std::initializer_list<OpId> more = {OpId::rmsprop_step, OpId::adagrad_step, OpId::unscale_check_inf,
                                           OpId::update_scale};
  for (DType dt : {kFloat32, kBFloat16, kFloat16}) {
    for (bool masters : {true, false}) {
      if (!masters && dt == kFloat32) continue;
      INFO(dtype_name(dt) << (masters ? " with masters" : " without masters"));
      tensor_list cuda;
      const tensor_list cpu = both(more, [&] {
        auto rms_ps = step_params(dt), ada_ps = step_params(dt);
        optim::RMSprop rms(rms_ps, optim::RMSpropOptions(1e-3).momentum(0.9).centered(true).weight_decay(1e-2));
        optim::Adagrad ada(ada_ps, optim::AdagradOptions(1e-2).lr_decay(0.1).initial_accumulator_value(0.1));
        rms.set_master_weights(masters);
        ada.set_master_weights(masters);
        amp::GradScaler scaler;
        for (int s = 0; s < 3; ++s) {
          step_grads(rms_ps, s);
          step_grads(ada_ps, s, scaler.get_scale());
          if (s == 0) ada_ps[0].grad().select(0, 1).fill_(NAN);
          rms.step();
          scaler.step(ada);
          scaler.update();
        }
        tensor_list r;
        for (const Tensor& p : rms_ps) r.push_back(p.detach());
        for (const Tensor& p : ada_ps) r.push_back(p.detach());
        return r;
      }, cuda);
      check_close(cpu, cuda, "rmsprop/adagrad", dt == kFloat32 ? 1e-6 : tolerance(dt) / 4);
    }
  }
  // LAMB over tensors of several chunks (partial norms), the clip active, with and without masters, under the
  // scaler's fused unscale with a skipped step.
  for (DType dt : {kFloat32, kBFloat16, kFloat16}) {
    for (bool masters : {true, false}) {
      if (!masters && dt == kFloat32) continue;
      INFO(dtype_name(dt) << (masters ? " with masters" : " without masters") << " LAMB");
      tensor_list cuda;
      const tensor_list cpu = both({OpId::lamb_step, OpId::unscale_check_inf, OpId::update_scale}, [&] {
        std::vector<Tensor> ps = step_params(dt);
        ps.push_back(rnd({40000}, dt, 77).set_requires_grad(true));
        optim::LAMB lamb(ps, optim::LAMBOptions(1e-2));
        lamb.set_master_weights(masters);
        amp::GradScaler scaler;
        for (int s = 0; s < 3; ++s) {
          step_grads(ps, s, scaler.get_scale());
          if (s == 0) ps[3].grad().select(0, 5).fill_(INFINITY);
          scaler.step(lamb);
          scaler.update();
        }
        return tensor_list(ps.begin(), ps.end());
      }, cuda);
      check_close(cpu, cuda, "lamb", dt == kFloat32 ? 1e-6 : tolerance(dt) / 4);
    }
  }
  // Stochastic rounding without masters: SGD with an exact f32 update rounds to the CPU's bits.
  for (DType dt : {kBFloat16, kFloat16}) {
    INFO(dtype_name(dt) << " stochastic rounding");
    tensor_list cuda;
    const tensor_list cpu = both(ops, [&] {
      auto ps = step_params(dt);
      optim::SGD opt(ps, optim::SGDOptions(1.0 / 64));
      opt.set_master_weights(false);
      opt.set_stochastic_rounding(true, optim::StochasticRoundingOptions().seed(31));
      for (int s = 0; s < 3; ++s) {
        for (const Tensor& p : ps) p.set_grad(rnd(p.sizes(), kFloat64, 200 + s).to(dt));
        opt.step();
      }
      return tensor_list(ps.begin(), ps.end());
    }, cuda);
    check_same(cpu, cuda, "stochastically rounded SGD");
  }
}

TEST_CASE("emulated CUDA resampling (interpolate forward and its gathered adjoint) gives the CPU's values",
          "[emulated][resize]") {
  struct Case {
    IntList shape, size;
    std::string mode;
    bool ac;
  };
  const std::vector<Case> cases = {
      {{2, 3, 9, 14}, {20, 5}, "nearest", false},        {{2, 3, 9, 14}, {4, 31}, "nearest-exact", false},
      {{2, 3, 9, 14}, {20, 5}, "bilinear", false},       {{2, 3, 9, 14}, {4, 31}, "bilinear", true},
      {{2, 3, 9, 14}, {9, 40}, "bilinear", false},       {{3, 2, 25}, {60}, "linear", false},
      {{1, 2, 5, 6, 7}, {9, 3, 10}, "trilinear", false}, {{1, 2, 5, 6, 7}, {2, 12, 4}, "nearest", false},
  };
  for (DType dt : {kFloat32, kFloat64, kFloat16, kBFloat16}) {
    for (const Case& c : cases) {
      INFO(dtype_name(dt) << " " << c.mode << " to " << shape_str(c.size) << " align_corners " << c.ac);
      const bool linear = c.mode != "nearest" && c.mode != "nearest-exact";
      tensor_list cuda;
      const tensor_list cpu = both({OpId::resample, OpId::resample_backward}, [&] {
        Tensor x = rnd(c.shape, dt, 11).set_requires_grad(true);
        const Tensor y = interpolate(x, c.size, {}, c.mode, linear ? std::optional<bool>(c.ac) : std::nullopt);
        sum(y * rnd(y.sizes(), dt, 12)).backward();
        return tensor_list{y.detach(), x.grad()};
      }, cuda);
      // The same sums in the same order; only multiply-add contraction may differ.
      check_close(cpu, cuda, "interpolate", tolerance(dt) / 10);
    }
  }
}

TEST_CASE("emulated CUDA pad (the gather and each input's sum over its readers) gives the CPU's values",
          "[emulated][pad]") {
  struct Case {
    IntList shape, pads;
    const char* mode;
  };
  const std::vector<Case> cases = {
      {{2, 3, 9}, {3, 5}, "reflect"},           {{2, 3, 9, 14}, {2, -1, 6, 1}, "replicate"},
      {{2, 3, 9, 14}, {-1, 3, 3, 1}, "circular"}, {{1, 2, 5, 6, 7}, {1, 2, 3, 0, 4, 1}, "reflect"},
      {{2, 3, 5, 6}, {1, 2, -1, 3}, "constant"}, {{3, 4, 5}, {2, 2, 0, 1, 1, 0}, "constant"},
  };
  for (DType dt : {kFloat32, kFloat64, kFloat16, kBFloat16}) {
    for (const Case& c : cases) {
      INFO(dtype_name(dt) << " " << c.mode << " " << shape_str(c.pads));
      tensor_list cuda;
      const tensor_list cpu = both({OpId::pad, OpId::pad_backward}, [&] {
        Tensor x = rnd(c.shape, dt, 13).set_requires_grad(true);
        const Tensor y = pad(x, c.pads, c.mode, 0.5);
        sum(y * rnd(y.sizes(), dt, 14)).backward();
        return tensor_list{y.detach(), x.grad()};
      }, cuda);
      check_same(cpu, cuda, std::string("pad ") + c.mode);  // the same sums in the same order
    }
  }
  for (DType dt : {kInt64, kInt32, kUInt8, kBool}) {
    INFO(dtype_name(dt));
    tensor_list cuda;
    const tensor_list cpu = both({OpId::pad}, [&] {
      return tensor_list{pad(gt(rnd({2, 3, 4}, kFloat32, 15), 0.0).to(dt), {1, 2, 2, 1}, "reflect"),
                         pad(ones({2, 3}, TensorOptions(dt)), {1, 1}, "constant", 1.0)};
    }, cuda);
    check_same(cpu, cuda, "pad of integers");
  }
}
