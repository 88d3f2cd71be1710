// CUDA GEMMs on cuBLASLt: mm, strided-batched bmm, and linear's fused bias / bias+ReLU / bias-gradient epilogues,
// with handles, descriptors, heuristics and workspaces cached per device.
#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <utility>

#include "ops/cuda/cuda_common.h"
#include "ops/cuda/linalg_launch.h"
#include "ops/dispatch.h"
#include "ops/linalg.h"

namespace mpx::cuda {
namespace {

constexpr int64_t kWorkspaceBytes = int64_t{32} << 20;
constexpr int kMaxLtDevices = 64;

// One operand as cuBLASLt sees it: a column-major matrix (rows x cols, leading dimension ld,
// batch_stride elements between the matrices of a batch) and the op that makes it a factor.
struct LtOperand {
  const void* ptr = nullptr;
  cublasOperation_t op = CUBLAS_OP_N;
  int64_t rows = 0, cols = 0, ld = 0, batch_stride = 0;
};

// cuBLASLt is column-major; mpx is row-major. out = a @ b is computed as out^T = b^T a^T, so a
// row-major [r, c] view with strides (s0, s1) must become the column-major operand whose op
// yields its transpose [c, r]. Dense rows: the memory already is that transpose (op N, ld s0);
// dense columns: the memory is the matrix itself (op T, ld s1). Size-1 dims have no stride
// constraint. False when neither holds (the caller makes the view contiguous).
bool as_lt_operand(int64_t r, int64_t c, int64_t s0, int64_t s1, LtOperand* o) {
  if ((c <= 1 || s1 == 1) && (r <= 1 || s0 >= std::max<int64_t>(c, 1))) {
    o->op = CUBLAS_OP_N;
    o->rows = c;
    o->cols = r;
    o->ld = r <= 1 ? std::max<int64_t>(c, 1) : s0;
    return true;
  }
  if ((r <= 1 || s0 == 1) && (c <= 1 || s1 >= std::max<int64_t>(r, 1))) {
    o->op = CUBLAS_OP_T;
    o->rows = r;
    o->cols = c;
    o->ld = c <= 1 ? std::max<int64_t>(r, 1) : s1;
    return true;
  }
  return false;
}

// The operand for the last two dims of t (a 2-d matrix or a 3-d batch); copies t when it is
// not dense in either. `keep` holds the copy alive until the call is enqueued.
LtOperand operand_of(const Tensor& t, Tensor* keep) {
  const int64_t d = t.dim();
  LtOperand o;
  Tensor src = t;
  const bool batched = d == 3;
  const bool batch_ok = !batched || t.size(0) <= 1 || t.stride(0) >= 0;
  if (!batch_ok || !as_lt_operand(t.size(d - 2), t.size(d - 1), t.stride(d - 2), t.stride(d - 1), &o)) {
    src = t.contiguous();
    as_lt_operand(src.size(d - 2), src.size(d - 1), src.stride(d - 2), src.stride(d - 1), &o);
  }
  o.batch_stride = batched && src.size(0) > 1 ? src.stride(0) : 0;
  o.ptr = src.numel() ? src.raw_data() : nullptr;
  *keep = src;
  return o;
}

// The largest power of two (up to 256, cuBLASLt's default requirement) dividing an address and,
// for a batch, the byte offset between its matrices: what the heuristic may assume.
uint32_t alignment_of(const void* p, int64_t batch_stride_bytes = 0) {
  const uint64_t v = reinterpret_cast<uintptr_t>(p) | static_cast<uint64_t>(batch_stride_bytes) | 256u;
  return static_cast<uint32_t>(v & (~v + 1));
}

cudaDataType_t lt_type(DType dt) {
  switch (dt) {
    case kFloat16: return CUDA_R_16F;
    case kBFloat16: return CUDA_R_16BF;
    case kFloat64: return CUDA_R_64F;
    default: return CUDA_R_32F;
  }
}

// f16/bf16 accumulate in f32 on Tensor Cores; f32 uses TF32 Tensor Cores only when allowed.
cublasComputeType_t compute_type(DType dt) {
  switch (dt) {
    case kFloat64: return CUBLAS_COMPUTE_64F;
    case kFloat32: return tf32_allowed() ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
    default: return CUBLAS_COMPUTE_32F;
  }
}

// One GEMM call: D[batch] (column-major m x n, ld m) = alpha * op(A) op(B) + beta * D (+ epilogue),
// where A is our b and B is our a.
struct LtCall {
  const char* op = "mm";
  DType dt = kFloat32;
  int device = 0;
  int64_t batch = 1, n = 0, m = 0, k = 0;
  LtOperand A, B;
  void* d = nullptr;
  double alpha = 1.0, beta = 0.0;
  cublasLtEpilogue_t epilogue = CUBLASLT_EPILOGUE_DEFAULT;
  void* bias = nullptr;  // the bias (BIAS epilogues) or the bias gradient (BGRADB)
};

std::string shapes_of(const LtCall& c) {
  std::string s = dtype_name(c.dt);
  s += c.batch > 1 ? " [" + std::to_string(c.batch) + ", " : " [";
  s += std::to_string(c.n) + ", " + std::to_string(c.k) + "] @ [";
  if (c.batch > 1) s += std::to_string(c.batch) + ", ";
  s += std::to_string(c.k) + ", " + std::to_string(c.m) + "]";
  return s;
}

[[noreturn]] void lt_error(const LtCall& c, const char* call, cublasStatus_t st) {
  MPX_ERROR(c.op, ": ", call, " failed for ", shapes_of(c), " on cuda:", c.device, ": ", cublasLtGetStatusName(st),
            " (", cublasLtGetStatusString(st), ")",
            st == CUBLAS_STATUS_ALLOC_FAILED ? "; the GPU is out of memory: reduce the batch size" : "");
}

#define MPX_LT_CHECK(c, call)                                     \
  do {                                                            \
    const cublasStatus_t mpx_st_ = (call);                        \
    if (mpx_st_ != CUBLAS_STATUS_SUCCESS) lt_error(c, #call, mpx_st_); \
  } while (0)

// Everything cuBLASLt needs for one shape/dtype/layout/alignment: built and asked for an
// algorithm once, then reused. Never destroyed (the process may outlive the CUDA context).
struct Plan {
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, d = nullptr;
  cublasLtMatmulAlgo_t algo{};
  bool supported = false;  // false: no algorithm (only kept for epilogues, which then fall back)
};

using PlanKey = std::array<int64_t, 24>;

struct LtState {
  std::mutex mu;  // guards everything below and serializes enqueues (the bias pointer lives in shared descriptors)
  std::array<cublasLtHandle_t, kMaxLtDevices> handles{};
  std::map<PlanKey, Plan> plans;
  std::map<std::pair<int, cudaStream_t>, Tensor> workspaces;  // per stream: concurrent streams must not share one
};
LtState& state() {
  static auto* s = new LtState;  // leaked on purpose: no cuBLASLt or pool calls during static destruction
  return *s;
}

cublasLtMatrixLayout_t make_layout(const LtCall& c, cudaDataType_t t, int64_t rows, int64_t cols, int64_t ld,
                                   int64_t batch_stride) {
  cublasLtMatrixLayout_t l = nullptr;
  MPX_LT_CHECK(c, cublasLtMatrixLayoutCreate(&l, t, static_cast<uint64_t>(rows), static_cast<uint64_t>(cols), ld));
  if (c.batch > 1) {
    const int32_t count = static_cast<int32_t>(c.batch);
    MPX_LT_CHECK(c, cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count, sizeof(count)));
    MPX_LT_CHECK(c, cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &batch_stride,
                                                     sizeof(batch_stride)));
  }
  return l;
}

// Builds the descriptors of a call and asks the heuristic for its best algorithm, telling it the
// operands' real alignment (odd pointers and leading dimensions need kernels that allow them).
Plan make_plan(const LtCall& c, cublasLtHandle_t h, cublasComputeType_t ct, uint32_t align[5]) {
  Plan p;
  const cudaDataType_t t = lt_type(c.dt);
  const cudaDataType_t scale = c.dt == kFloat64 ? CUDA_R_64F : CUDA_R_32F;
  MPX_LT_CHECK(c, cublasLtMatmulDescCreate(&p.desc, ct, scale));
  MPX_LT_CHECK(c, cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_TRANSA, &c.A.op, sizeof(c.A.op)));
  MPX_LT_CHECK(c, cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_TRANSB, &c.B.op, sizeof(c.B.op)));
  if (c.epilogue != CUBLASLT_EPILOGUE_DEFAULT) {
    MPX_LT_CHECK(c, cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &c.epilogue, sizeof(c.epilogue)));
    // The heuristic reads the pointer's value for its alignment.
    MPX_LT_CHECK(c, cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &c.bias, sizeof(c.bias)));
  }
  p.a = make_layout(c, t, c.A.rows, c.A.cols, c.A.ld, c.A.batch_stride);
  p.b = make_layout(c, t, c.B.rows, c.B.cols, c.B.ld, c.B.batch_stride);
  p.d = make_layout(c, t, c.m, c.n, std::max<int64_t>(c.m, 1), c.m * c.n);

  cublasLtMatmulPreference_t pref = nullptr;
  MPX_LT_CHECK(c, cublasLtMatmulPreferenceCreate(&pref));
  const uint64_t ws = kWorkspaceBytes;
  cublasStatus_t st = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws));
  const cublasLtMatmulPreferenceAttributes_t attrs[4] = {
      CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
      CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES};
  for (int i = 0; i < 4 && st == CUBLAS_STATUS_SUCCESS; ++i)
    st = cublasLtMatmulPreferenceSetAttribute(pref, attrs[i], &align[i], sizeof(align[i]));
  if (st == CUBLAS_STATUS_SUCCESS && (c.dt == kFloat16 || c.dt == kBFloat16)) {
    // Split-K partial sums in f32 (or none): the other schemes add them up in the output's
    // f16/bf16, which breaks the one-rounding contract as k grows (weight gradients).
    const uint32_t schemes = CUBLASLT_REDUCTION_SCHEME_NONE | CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE;
    st = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK, &schemes,
                                              sizeof(schemes));
  }
  cublasLtMatmulHeuristicResult_t res{};
  int found = 0;
  if (st == CUBLAS_STATUS_SUCCESS)
    st = cublasLtMatmulAlgoGetHeuristic(h, p.desc, p.a, p.b, p.d, p.d, pref, 1, &res, &found);
  cublasLtMatmulPreferenceDestroy(pref);
  // A fused form cuBLASLt will not plan (whatever status it says that with, e.g. INVALID_VALUE
  // for an f64 bias epilogue) is computed unfused by the op.
  if (c.epilogue != CUBLASLT_EPILOGUE_DEFAULT && (st != CUBLAS_STATUS_SUCCESS || found == 0)) return p;
  MPX_LT_CHECK(c, st);
  if (found == 0)
    MPX_ERROR(c.op, ": cuBLASLt has no algorithm for ", shapes_of(c), " on cuda:", c.device,
              " (operand alignments ", align[0], "/", align[1], "/", align[3],
              " bytes); make the operands contiguous with .contiguous()");
  p.algo = res.algo;
  p.supported = true;
  return p;
}

// Runs one call on the current stream of its device. Returns false (nothing written) only for an
// epilogue cuBLASLt has no algorithm for.
bool run(const LtCall& c, const Tensor& out) {
  TensorDeviceGuard g(out);
  cudaStream_t s = stream_of(out);
  if (c.batch * c.n * c.m == 0) return true;
  const size_t esize = element_size(c.dt);
  if (c.k == 0) {  // empty inner dimension: the product is zero, so out = beta * out
    if (c.epilogue != CUBLASLT_EPILOGUE_DEFAULT) return false;
    const int64_t count = c.batch * c.n * c.m;
    if (c.beta == 0.0) MPX_CUDA_CHECK(cudaMemsetAsync(c.d, 0, static_cast<size_t>(count) * esize, s), c.op);
    else if (c.beta != 1.0) launch_scale(c.d, count, c.dt, c.beta, s);
    return true;
  }
  const cublasComputeType_t ct = compute_type(c.dt);
  const int64_t d_stride_bytes = c.batch > 1 ? c.m * c.n * static_cast<int64_t>(esize) : 0;
  uint32_t align[5] = {alignment_of(c.A.ptr, c.A.batch_stride * static_cast<int64_t>(esize)),
                       alignment_of(c.B.ptr, c.B.batch_stride * static_cast<int64_t>(esize)),
                       alignment_of(c.d, d_stride_bytes), alignment_of(c.d, d_stride_bytes),
                       c.bias ? alignment_of(c.bias) : 0u};
  const PlanKey key = {c.device, static_cast<int64_t>(c.dt), static_cast<int64_t>(ct), static_cast<int64_t>(c.epilogue),
                       c.batch, c.n, c.m, c.k,
                       static_cast<int64_t>(c.A.op), c.A.ld, c.A.batch_stride,
                       static_cast<int64_t>(c.B.op), c.B.ld, c.B.batch_stride,
                       align[0], align[1], align[2], align[4], 0, 0, 0, 0, 0, 0};

  LtState& st = state();
  std::lock_guard<std::mutex> lock(st.mu);
  MPX_CHECK(c.device >= 0 && c.device < kMaxLtDevices, c.op, ": cuda:", c.device, " is beyond the ", kMaxLtDevices,
            " devices mpx supports");
  cublasLtHandle_t& h = st.handles[c.device];
  if (!h) MPX_LT_CHECK(c, cublasLtCreate(&h));
  auto it = st.plans.find(key);
  if (it == st.plans.end()) it = st.plans.emplace(key, make_plan(c, h, ct, align)).first;
  const Plan& p = it->second;
  if (!p.supported) return false;

  // The stream's cached workspace; during a CUDA graph capture, one of the graph's own instead
  // (allocated and freed inside it): a workspace first made inside a capture would belong to
  // that graph, and capture streams go on to serve later graphs.
  Tensor call_ws;
  Tensor* ws = &call_ws;
  const TensorOptions wo = TensorOptions(kUInt8).device(Device::cuda(c.device));
  if (is_capturing()) {
    call_ws = empty({kWorkspaceBytes}, wo);
  } else {
    ws = &st.workspaces[{c.device, s}];
    if (!ws->defined()) *ws = empty({kWorkspaceBytes}, wo);
  }

  if (c.epilogue != CUBLASLT_EPILOGUE_DEFAULT)
    MPX_LT_CHECK(c, cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &c.bias, sizeof(c.bias)));
  union Scalar {
    float f;
    double d;
  } alpha{}, beta{};
  if (c.dt == kFloat64) {
    alpha.d = c.alpha;
    beta.d = c.beta;
  } else {
    alpha.f = static_cast<float>(c.alpha);
    beta.f = static_cast<float>(c.beta);
  }
  MPX_LT_CHECK(c, cublasLtMatmul(h, p.desc, &alpha, c.A.ptr, p.a, c.B.ptr, p.b, &beta, c.d, p.d, c.d, p.d, &p.algo,
                                 ws->raw_data(), static_cast<size_t>(kWorkspaceBytes), s));
  return true;
}

void check_out(const char* op, const Tensor& out) {
  MPX_CHECK(out.is_contiguous(), op, ": the CUDA GEMM writes a contiguous output, got strides ", shape_str(out.strides()),
            "; pass a contiguous tensor");
}

// out[n, m] = alpha * a @ b + beta * out (kernels::GemmFn).
void gemm(const Tensor& out, const Tensor& a, const Tensor& b, double alpha, double beta) {
  check_out("mm", out);
  Tensor ka, kb;
  LtCall c;
  c.op = "mm";
  c.dt = out.dtype();
  c.device = out.device().index;
  c.n = a.size(0);
  c.k = a.size(1);
  c.m = b.size(1);
  if (out.numel() == 0) return;
  if (c.k > 0) {
    c.A = operand_of(b, &kb);
    c.B = operand_of(a, &ka);
  }
  c.d = out.raw_data();
  c.alpha = alpha;
  c.beta = beta;
  run(c, out);
}

// out[i] = alpha * a[i] @ b[i] + beta * out[i] over one strided batch (kernels::BmmFn).
void bmm(const Tensor& out, const Tensor& a, const Tensor& b, double alpha, double beta) {
  check_out("bmm", out);
  if (out.numel() == 0) return;
  Tensor ka, kb;
  LtCall c;
  c.op = "bmm";
  c.dt = out.dtype();
  c.device = out.device().index;
  c.batch = a.size(0);
  c.n = a.size(1);
  c.k = a.size(2);
  c.m = b.size(2);
  MPX_CHECK(c.batch <= INT32_MAX, "bmm: batch of ", c.batch, " matrices exceeds cuBLASLt's limit of 2^31 - 1; split it");
  if (c.k > 0) {
    c.A = operand_of(b, &kb);
    c.B = operand_of(a, &ka);
  }
  c.d = out.raw_data();
  c.alpha = alpha;
  c.beta = beta;
  run(c, out);
}

// GEMM with a fused bias / bias+ReLU / bias-gradient epilogue (kernels::GemmEpilogueFn).
bool gemm_epilogue(const Tensor& out, const Tensor& a, const Tensor& b, const Tensor& bias, kernels::GemmEpilogue ep) {
  const char* op = ep == kernels::GemmEpilogue::kBiasGrad ? "linear backward" : "linear";
  if (!out.is_contiguous() || !bias.is_contiguous() || bias.dtype() != out.dtype()) return false;
  // Empty products are rare and cheap: the unfused path gets them right (bias rows, zero sums).
  if (a.size(0) == 0 || a.size(1) == 0 || b.size(1) == 0) return false;
  Tensor ka, kb;
  LtCall c;
  c.op = op;
  c.dt = out.dtype();
  c.device = out.device().index;
  c.n = a.size(0);
  c.k = a.size(1);
  c.m = b.size(1);
  c.A = operand_of(b, &kb);
  c.B = operand_of(a, &ka);
  c.d = out.raw_data();
  c.bias = bias.raw_data();
  switch (ep) {
    case kernels::GemmEpilogue::kBias: c.epilogue = CUBLASLT_EPILOGUE_BIAS; break;
    case kernels::GemmEpilogue::kBiasRelu: c.epilogue = CUBLASLT_EPILOGUE_RELU_BIAS; break;
    case kernels::GemmEpilogue::kBiasGrad: c.epilogue = CUBLASLT_EPILOGUE_BGRADB; break;
    // cuBLASLt's GELU epilogues have not run here yet: linear_gelu takes the unfused path on CUDA.
    default: return false;
  }
  return run(c, out);
}

}  // namespace

MPX_REGISTER_KERNELS(cuda_linalg) {
  for (DType dt : {kFloat32, kFloat16, kBFloat16, kFloat64}) {
    dispatch::register_kernel<OpId::mm>(DeviceType::kCUDA, dt, &gemm);
    dispatch::register_kernel<OpId::bmm>(DeviceType::kCUDA, dt, &bmm);
    dispatch::register_kernel<OpId::linear>(DeviceType::kCUDA, dt, &gemm_epilogue);
  }
}

}  // namespace mpx::cuda
