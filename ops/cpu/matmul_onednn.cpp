// f32 and bf16 matrix products (mm, bmm, linear with its bias/ReLU/GELU epilogue) on oneDNN's matmul primitive.
#include "ops/cpu/matmul_onednn.h"
#include "ops/cpu/onednn_util.h"

#include <omp.h>

#include <array>
#include <bit>
#include <cstring>
#include <memory>
#include <mutex>
#include <optional>
#include <unordered_map>
#include <utility>
#include <vector>

#include <oneapi/dnnl/dnnl.hpp>

#include "core/error.h"

namespace mpx::cpu::onednn {
namespace {
using md = dnnl::memory::desc;
using dt = dnnl::memory::data_type;

std::optional<dt> type_of(DType d) {
  if (d == kFloat32) return dt::f32;
  if (d == kBFloat16) return dt::bf16;
  return std::nullopt;
}

// Everything that decides a primitive: batch, sizes, strides of both operands, dtypes, the
// epilogue and the thread count (oneDNN fixes it when it creates a primitive).
using Key = std::array<int64_t, 20>;
struct Entry {
  dnnl::matmul prim;
  md a, b, bias, out, scratch;
};

// Operand descriptor: [B, r, c] with the tensor's strides; a broadcast batch (stride 0) is a batch of 1.
// `pack`: a single matrix is described with a batch stride past its end (nothing reads it), so oneDNN does not
// see a plain layout and copies the operand into its blocked buffer instead of reading it in place.
md operand(int64_t batch, int64_t r, int64_t c, int64_t sb, int64_t sr, int64_t sc, dt type, bool pack = false) {
  if (sb == 0) batch = 1;
  if (batch == 1 && pack) return md({1, r, c}, type, {r * c + 16, sr, sc});
  return md({batch, r, c}, type, {sb == 0 ? r * c : sb, sr, sc});
}

// oneDNN 2.6's f32 kernels read a row-major right operand in place, a K-block of rows at a time: when its row
// stride is a multiple of 4 KiB those rows share L1 sets and evict each other (GPT-2's MLP backward,
// [1024, 768] @ [768, 3072], ran at 53 GFLOP/s on one AVX-512 core instead of 115). Packed, they do not. Other
// strides measured even or worse packed (the copy costs more than it saves), so only these are.
bool pack_right(dt type, int64_t batch, int64_t row_stride, int64_t col_stride) {
  return type == dt::f32 && batch == 1 && col_stride == 1 && (row_stride * 4) % 4096 == 0;
}

std::shared_ptr<Entry> lookup(const Key& k, dt ta, dt tbias) {
  static std::mutex mu;
  static auto* cache = new std::unordered_map<Key, std::shared_ptr<Entry>, KeyHash>();
  std::lock_guard<std::mutex> lock(mu);
  if (auto it = cache->find(k); it != cache->end()) return it->second;
  std::shared_ptr<Entry> e;
  try {
    const int64_t B = k[0], n = k[1], kk = k[2], m = k[3];
    const bool has_bias = k[10] != 0;
    const auto act = static_cast<Activation>(k[11]);
    const double alpha = std::bit_cast<double>(k[12]), beta = std::bit_cast<double>(k[13]);
    auto ent = std::make_shared<Entry>();
    ent->a = operand(B, n, kk, k[4], k[5], k[6], ta);
    ent->b = operand(B, kk, m, k[7], k[8], k[9], ta, pack_right(ta, B, k[8], k[9]));
    ent->out = md({B, n, m}, ta, {n * m, m, 1});
    if (has_bias) ent->bias = md({1, 1, m}, tbias, {m, m, 1});
    dnnl::primitive_attr attr;
    attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
    if (alpha != 1.0) attr.set_output_scales(0, {static_cast<float>(alpha)});
    dnnl::post_ops po;
    if (beta != 0.0) po.append_sum(static_cast<float>(beta));
    if (act == Activation::kRelu) po.append_eltwise(1.0f, dnnl::algorithm::eltwise_relu, 0.0f, 0.0f);
    if (act == Activation::kGeluTanh) po.append_eltwise(1.0f, dnnl::algorithm::eltwise_gelu_tanh, 0.0f, 0.0f);
    if (act == Activation::kGeluErf) po.append_eltwise(1.0f, dnnl::algorithm::eltwise_gelu_erf, 0.0f, 0.0f);
    attr.set_post_ops(po);
    dnnl::matmul::desc d = has_bias ? dnnl::matmul::desc(ent->a, ent->b, ent->bias, ent->out)
                                    : dnnl::matmul::desc(ent->a, ent->b, ent->out);
    dnnl::matmul::primitive_desc pd(d, attr, engine());
    // oneDNN's reference loops are far slower than Eigen: leave those cases to it.
    if (std::strncmp(pd.impl_info_str(), "ref", 3) != 0) {
      ent->scratch = pd.scratchpad_desc();
      ent->prim = dnnl::matmul(pd);
      e = ent;
    }
  } catch (const dnnl::error&) {
    e = nullptr;  // an unsupported case: the Eigen kernel takes it
  }
  cache->emplace(k, e);
  return e;
}

// Runs a matmul primitive on its operands with the shared scratchpad buffer, and waits for it.
void execute(const dnnl::matmul& prim, std::unordered_map<int, dnnl::memory> args, const md& scratch) {
  args.emplace(DNNL_ARG_SCRATCHPAD, dnnl::memory(scratch, engine(), buffer(5, std::max<size_t>(scratch.get_size(), 64))));
  dnnl::stream& s = stream();
  prim.execute(s, args);
  s.wait();
}

// A product for matmul_packed: its primitive, built for `any` weights, and the right operand reordered into the
// layout that primitive reads (oneDNN's own matmul otherwise re-packs a bf16 right operand on every call: 0.052
// against 0.041 ms for [16, 256] x [256, 1024] on one Zen 4 core, 0.104 against 0.078 in f32).
struct Packed {
  dnnl::matmul prim;
  md a, out, scratch;
  dnnl::memory b;
  std::array<int64_t, 8> shape;  // n, k, m, a's strides, dtype, threads, beta's bits
};
// A plan: one product per shape of the left operand (a packed sequence's steps shrink as its sequences end), the
// packed right operand shared among those whose primitives read the same layout.
struct PackedPlan {
  const void* b = nullptr;  // the right operand the plan packed (the caller keeps it unchanged while it holds the plan)
  std::vector<Packed> products;
};

// The product of `plan` for `shape` (a's [n, k], out's [n, m]), built on first use; nullptr where oneDNN has only
// its reference loops for it.
const Packed* packed_product(PackedPlan& plan, const std::array<int64_t, 8>& shape, dt type, double beta, const Tensor& b) {
  for (const Packed& p : plan.products)
    if (p.shape == shape) return &p;
  const int64_t n = shape[0], k = shape[1], m = shape[2];
  Packed p;
  try {
    p.a = md({n, k}, type, {shape[3], shape[4]});
    p.out = md({n, m}, type, {m, 1});
    dnnl::primitive_attr attr;
    attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
    dnnl::post_ops po;
    if (beta != 0.0) po.append_sum(static_cast<float>(beta));
    attr.set_post_ops(po);
    const md any({k, m}, type, dnnl::memory::format_tag::any);
    dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(p.a, any, p.out), attr, engine());
    if (std::strncmp(pd.impl_info_str(), "ref", 3) == 0) return nullptr;
    p.prim = dnnl::matmul(pd);
    p.scratch = pd.scratchpad_desc();
    for (const Packed& q : plan.products)
      if (q.b.get_desc() == pd.weights_desc()) p.b = q.b;
    if (!p.b) {
      p.b = dnnl::memory(pd.weights_desc(), engine());
      dnnl::memory src(md({k, m}, type, {b.stride(0), b.stride(1)}), engine(), b.raw_data());
      dnnl::reorder(src, p.b).execute(stream(), src, p.b);
      stream().wait();
    }
  } catch (const dnnl::error&) {
    return nullptr;
  }
  p.shape = shape;
  plan.products.push_back(std::move(p));
  return &plan.products.back();
}

}  // namespace

bool matmul_packed(const Tensor& out, const Tensor& a, const Tensor& b, double beta, std::shared_ptr<void>& plan) {
  const auto ta = type_of(a.dtype());
  if (!ta || a.dim() != 2 || b.dim() != 2 || b.dtype() != a.dtype() || out.dtype() != a.dtype() || !out.is_contiguous())
    return false;
  if (*ta == dt::bf16 && !matmul_bf16_native()) return false;
  const int64_t n = a.size(0), k = a.size(1), m = b.size(1);
  if (n == 0 || m == 0 || k == 0 || b.size(0) != k || out.size(0) != n || out.size(1) != m) return false;
  const int64_t as0 = a.stride(0), as1 = a.stride(1);
  if ((as0 != 1 && as1 != 1) || (b.stride(0) != 1 && b.stride(1) != 1)) return false;
  if (!plan) plan = std::make_shared<PackedPlan>();
  auto& pp = *static_cast<PackedPlan*>(plan.get());
  if (pp.b == nullptr) pp.b = b.raw_data();
  if (pp.b != b.raw_data()) return false;  // a plan packs one right operand
  const Packed* p = packed_product(pp, {n, k, m, as0, as1, static_cast<int64_t>(*ta), omp_get_max_threads(),
                                        std::bit_cast<int64_t>(beta)}, *ta, beta, b);
  if (!p) return false;
  execute(p->prim,
          {{DNNL_ARG_SRC, dnnl::memory(p->a, engine(), a.raw_data())},
           {DNNL_ARG_WEIGHTS, p->b},
           {DNNL_ARG_DST, dnnl::memory(p->out, engine(), out.raw_data())}},
          p->scratch);
  return true;
}

bool matmul_bf16_native() {
  static const bool ok = [] {
    const auto isa = dnnl::get_effective_cpu_isa();
    // bf16 below AVX-512 is oneDNN's reference code (or an emulation slower than Eigen on f32 copies).
    return isa == dnnl::cpu_isa::avx512_core || isa == dnnl::cpu_isa::avx512_core_vnni ||
           isa == dnnl::cpu_isa::avx512_core_bf16 || isa == dnnl::cpu_isa::avx512_core_amx;
  }();
  return ok;
}

bool matmul(const Tensor& out, const Tensor& a, const Tensor& b, double alpha, double beta, const Tensor& bias,
            Activation act) {
  const auto ta = type_of(a.dtype());
  if (!ta || b.dtype() != a.dtype() || out.dtype() != a.dtype() || !out.is_contiguous()) return false;
  if (*ta == dt::bf16 && !matmul_bf16_native()) return false;
  const bool batched = a.dim() == 3;
  const int64_t B = batched ? out.size(0) : 1;
  const int64_t n = a.size(-2), k = a.size(-1), m = b.size(-1);
  if (n == 0 || m == 0 || k == 0 || B == 0) return false;
  // Strides of a 2-d operand, with a batch stride that nothing reads.
  const int64_t asb = batched ? a.stride(0) : n * k, bsb = batched ? b.stride(0) : k * m;
  const int64_t as0 = a.stride(-2), as1 = a.stride(-1), bs0 = b.stride(-2), bs1 = b.stride(-1);
  // One unit stride per operand (row- or column-major with a leading dimension).
  if ((as0 != 1 && as1 != 1) || (bs0 != 1 && bs1 != 1)) return false;
  dt tbias = *ta;
  if (bias.defined()) {
    const auto tb = type_of(bias.dtype());
    if (!tb || !bias.is_contiguous() || bias.numel() != m || alpha != 1.0 || beta != 0.0) return false;
    tbias = *tb;
  }
  const Key key{B, n, k, m, asb, as0, as1, bsb, bs0, bs1, bias.defined() ? 1 : 0, static_cast<int64_t>(act),
                std::bit_cast<int64_t>(alpha), std::bit_cast<int64_t>(beta), static_cast<int64_t>(*ta),
                static_cast<int64_t>(tbias), omp_get_max_threads(), 0, 0, 0};
  auto e = lookup(key, *ta, tbias);
  if (!e) return false;
  auto mem = [](const md& d, const Tensor& t) { return dnnl::memory(d, engine(), t.raw_data()); };
  std::unordered_map<int, dnnl::memory> args{
      {DNNL_ARG_SRC, mem(e->a, a)}, {DNNL_ARG_WEIGHTS, mem(e->b, b)}, {DNNL_ARG_DST, mem(e->out, out)}};
  if (bias.defined()) args.emplace(DNNL_ARG_BIAS, mem(e->bias, bias));
  execute(e->prim, std::move(args), e->scratch);
  return true;
}

}  // namespace mpx::cpu::onednn
