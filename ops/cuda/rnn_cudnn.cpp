// Registers cuDNN's RNN for whole LSTM/GRU sequences (rnn_fused): cudnnRNNForward, cudnnRNNBackwardData_v8 and
// cudnnRNNBackwardWeights_v8, the parameters copied into and out of cuDNN's weight space at the addresses it reports.
#ifdef MPX_WITH_CUDNN
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "core/cuda.h"
#include "ops/cuda/cudnn_common.h"
#include "ops/dispatch.h"
#include "ops/op_utils.h"

namespace mpx::cuda {
namespace {
using kernels::RnnParams;
constexpr const char* kOp = "rnn_fused (cuDNN RNN)";

// MPX_CUDNN_RNN=0 keeps lstm/gru cell by cell on CUDA (to compare the two, or to rule this path out); read at
// each call, so a test can switch it.
bool enabled() {
  const char* v = std::getenv("MPX_CUDNN_RNN");
  return !(v && std::strcmp(v, "0") == 0);
}

// The descriptors of one call, owned.
struct Descriptors {
  cudnnRNNDescriptor_t rnn = nullptr;
  cudnnDropoutDescriptor_t dropout = nullptr;
  cudnnRNNDataDescriptor_t x = nullptr, y = nullptr;
  cudnnTensorDescriptor_t h = nullptr;
  Descriptors() {
    MPX_CUDNN_CHECK(cudnnCreateRNNDescriptor(&rnn), kOp);
    MPX_CUDNN_CHECK(cudnnCreateDropoutDescriptor(&dropout), kOp);
    MPX_CUDNN_CHECK(cudnnCreateRNNDataDescriptor(&x), kOp);
    MPX_CUDNN_CHECK(cudnnCreateRNNDataDescriptor(&y), kOp);
    MPX_CUDNN_CHECK(cudnnCreateTensorDescriptor(&h), kOp);
  }
  ~Descriptors() {
    cudnnDestroyTensorDescriptor(h);
    cudnnDestroyRNNDataDescriptor(y);
    cudnnDestroyRNNDataDescriptor(x);
    cudnnDestroyDropoutDescriptor(dropout);
    cudnnDestroyRNNDescriptor(rnn);
  }
  Descriptors(const Descriptors&) = delete;
  Descriptors& operator=(const Descriptors&) = delete;
};

// Sizes of a call: x [T, N, I] time-major, states [L * D, N, H].
struct Shape {
  int T = 0, N = 0, I = 0, H = 0, L = 0, D = 1;
};

int to_int(int64_t v, const char* what) {
  MPX_CHECK(v >= 0 && v <= INT32_MAX, kOp, ": ", what, " ", v, " exceeds cuDNN's 32-bit sizes");
  return static_cast<int>(v);
}

Shape shape_of(const Tensor& x, const RnnParams& p) {
  Shape s;
  s.T = to_int(x.size(0), "sequence length");
  s.N = to_int(x.size(1), "batch");
  s.I = to_int(x.size(2), "input size");
  s.H = to_int(p.hidden, "hidden size");
  s.L = to_int(p.num_layers, "layers");
  s.D = p.bidirectional ? 2 : 1;
  return s;
}

// Sets the descriptors; returns the first status cuDNN refused the configuration with (SUCCESS when all took it).
cudnnStatus_t describe(Descriptors& d, cudnnHandle_t handle, const RnnParams& p, DType dt, const Shape& s) {
  const cudnnDataType_t t = cudnn::data_type(dt, kOp);
  const cudnnDataType_t prec = dt == kFloat64 ? CUDNN_DATA_DOUBLE : CUDNN_DATA_FLOAT;
  // f32 on Tensor Cores only where TF32 is allowed, as the convolutions and GEMMs.
  const cudnnMathType_t math = dt == kFloat16 || dt == kBFloat16 ? CUDNN_TENSOR_OP_MATH
                               : dt == kFloat32 && tf32_allowed() ? CUDNN_TENSOR_OP_MATH
                               : dt == kFloat32                   ? CUDNN_FMA_MATH
                                                                  : CUDNN_DEFAULT_MATH;
  // No dropout inside cuDNN (its own random stream): the op runs cell by cell when layers drop out.
  cudnnStatus_t st = cudnnSetDropoutDescriptor(d.dropout, handle, 0.0f, nullptr, 0, 0);
  if (st != CUDNN_STATUS_SUCCESS) return st;
  st = cudnnSetRNNDescriptor_v8(d.rnn, CUDNN_RNN_ALGO_STANDARD, p.lstm ? CUDNN_LSTM : CUDNN_GRU,
                                p.has_biases ? CUDNN_RNN_DOUBLE_BIAS : CUDNN_RNN_NO_BIAS,
                                p.bidirectional ? CUDNN_BIDIRECTIONAL : CUDNN_UNIDIRECTIONAL, CUDNN_LINEAR_INPUT, t,
                                prec, math, s.I, s.H, s.H, s.L, d.dropout, 0);
  if (st != CUDNN_STATUS_SUCCESS) return st;
  // Every sequence has the full length: the packed time-major layout is [T, N, vector] itself.
  std::vector<int> lengths(static_cast<size_t>(s.N), s.T);
  st = cudnnSetRNNDataDescriptor(d.x, t, CUDNN_RNN_DATA_LAYOUT_SEQ_MAJOR_PACKED, s.T, s.N, s.I, lengths.data(),
                                 nullptr);
  if (st != CUDNN_STATUS_SUCCESS) return st;
  st = cudnnSetRNNDataDescriptor(d.y, t, CUDNN_RNN_DATA_LAYOUT_SEQ_MAJOR_PACKED, s.T, s.N, s.D * s.H,
                                 lengths.data(), nullptr);
  if (st != CUDNN_STATUS_SUCCESS) return st;
  const int dims[3] = {s.L * s.D, s.N, s.H}, strides[3] = {s.N * s.H, s.H, 1};
  return cudnnSetTensorNdDescriptor(d.h, t, 3, dims, strides);
}

// Copies every parameter into cuDNN's weight space (into = true) or a gradient space into `params`, at the
// addresses cudnnGetRNNWeightParams reports per (pseudo-layer, linear layer): cuDNN's gate order is PyTorch's.
void map_weights(cudnnHandle_t handle, const Descriptors& d, const RnnParams& p, const Shape& s, void* space,
                 size_t bytes, const tensor_list& params, bool into, size_t elem, cudaStream_t stream) {
  const int G = p.lstm ? 4 : 3, per = p.has_biases ? 4 : 2;
  cudnnTensorDescriptor_t md = nullptr, bd = nullptr;
  MPX_CUDNN_CHECK(cudnnCreateTensorDescriptor(&md), kOp);
  MPX_CUDNN_CHECK(cudnnCreateTensorDescriptor(&bd), kOp);
  auto copy = [&](void* cudnn_addr, const Tensor& t, int64_t offset, int64_t n) {
    char* ours = static_cast<char*>(t.raw_data()) + static_cast<size_t>(offset) * elem;
    const size_t nb = static_cast<size_t>(n) * elem;
    MPX_CUDA_CHECK(into ? cudaMemcpyAsync(cudnn_addr, ours, nb, cudaMemcpyDeviceToDevice, stream)
                        : cudaMemcpyAsync(ours, cudnn_addr, nb, cudaMemcpyDeviceToDevice, stream),
                   kOp);
  };
  try {
    for (int l = 0; l < s.L; ++l)
      for (int dir = 0; dir < s.D; ++dir) {
        const int pseudo = l * s.D + dir;
        const size_t k = static_cast<size_t>(pseudo * per);
        const int64_t in = l == 0 ? s.I : static_cast<int64_t>(s.D) * s.H;
        for (int lin = 0; lin < 2 * G; ++lin) {
          const bool recurrent = lin >= G;
          const int64_t gate = lin % G, cols = recurrent ? s.H : in;
          void *maddr = nullptr, *baddr = nullptr;
          MPX_CUDNN_CHECK(cudnnGetRNNWeightParams(handle, d.rnn, pseudo, bytes, space, lin, md, &maddr, bd, &baddr),
                          kOp);
          MPX_CHECK(maddr != nullptr && (!p.has_biases || baddr != nullptr), kOp, ": cuDNN gave no address for ",
                    "matrix ", lin, " of layer ", pseudo);
          // The matrix cuDNN reports must be [H, cols], as PyTorch's gate slice of w_ih / w_hh.
          cudnnDataType_t t;
          int nd = 0, dims[3] = {}, strides[3] = {};
          MPX_CUDNN_CHECK(cudnnGetTensorNdDescriptor(md, 3, &t, &nd, dims, strides), kOp);
          MPX_CHECK(static_cast<int64_t>(dims[0]) * dims[1] * dims[2] == s.H * cols, kOp, ": cuDNN's matrix ", lin,
                    " of layer ", pseudo, " holds ", dims[0] * dims[1] * dims[2], " values, expected ", s.H, " x ",
                    cols);
          copy(maddr, params[k + (recurrent ? 1 : 0)], gate * s.H * cols, s.H * cols);
          if (p.has_biases) copy(baddr, params[k + (recurrent ? 3 : 2)], gate * s.H, s.H);
        }
      }
  } catch (...) {
    cudnnDestroyTensorDescriptor(bd);
    cudnnDestroyTensorDescriptor(md);
    throw;
  }
  cudnnDestroyTensorDescriptor(bd);
  cudnnDestroyTensorDescriptor(md);
}

// The device copy of every sequence's length (cuDNN reads it asynchronously).
Tensor device_lengths(const Tensor& like, const Shape& s) {
  return full({s.N}, static_cast<double>(s.T), TensorOptions(kInt32).device(like.device()));
}

const void* ptr(const Tensor& t) { return t.defined() ? t.raw_data() : nullptr; }
void* mut(const Tensor& t) { return t.defined() ? t.raw_data() : nullptr; }

bool rnn_forward(const Tensor& y, const Tensor& hy, const Tensor& cy, Tensor& weights, Tensor& reserve,
                 const Tensor& x, const Tensor& hx, const Tensor& cx, const tensor_list& params, const RnnParams& p) {
  if (!enabled()) return false;
  TensorDeviceGuard guard(x);
  const cudnnHandle_t handle = cudnn::handle(x);
  const cudaStream_t stream = stream_of(x);
  const Shape s = shape_of(x, p);
  Descriptors d;
  const cudnnForwardMode_t mode = p.training ? CUDNN_FWD_MODE_TRAINING : CUDNN_FWD_MODE_INFERENCE;
  size_t wbytes = 0, work_bytes = 0, reserve_bytes = 0;
  cudnnStatus_t st = describe(d, handle, p, x.dtype(), s);
  if (st == CUDNN_STATUS_SUCCESS) st = cudnnGetRNNWeightSpaceSize(handle, d.rnn, &wbytes);
  if (st == CUDNN_STATUS_SUCCESS) st = cudnnGetRNNTempSpaceSizes(handle, d.rnn, mode, d.x, &work_bytes, &reserve_bytes);
  if (st != CUDNN_STATUS_SUCCESS) {
    if (!cudnn::refused(st)) cudnn::throw_error(st, kOp, "describing the RNN");
    cudnn::count_fallback(std::string(p.lstm ? "lstm" : "gru") + " " + dtype_name(x.dtype()) +
                              ": cuDNN's RNN refused it, ran cell by cell",
                          st);
    return false;
  }
  weights = cudnn::workspace(x, wbytes);
  MPX_CUDA_CHECK(cudaMemsetAsync(weights.raw_data(), 0, wbytes, stream), kOp);
  map_weights(handle, d, p, s, weights.raw_data(), wbytes, params, true, x.element_size(), stream);
  const Tensor work = cudnn::workspace(x, work_bytes);
  reserve = cudnn::workspace(x, reserve_bytes);
  const Tensor lengths = device_lengths(x, s);
  MPX_CUDNN_CHECK(cudnnRNNForward(handle, d.rnn, mode, lengths.data_ptr<int32_t>(), d.x, x.raw_data(), d.y,
                                  y.raw_data(), d.h, ptr(hx), hy.raw_data(), d.h, ptr(cx), mut(cy), wbytes,
                                  weights.raw_data(), work_bytes, mut(work), reserve_bytes, mut(reserve)),
                  kOp);
  return true;
}

void rnn_backward(const Tensor& dx, const Tensor& dhx, const Tensor& dcx, const tensor_list& dparams, const Tensor& x,
                  const Tensor& hx, const Tensor& cx, const Tensor& y, const Tensor& dy, const Tensor& dhy,
                  const Tensor& dcy, const Tensor& weights, const Tensor& reserve, const RnnParams& p) {
  TensorDeviceGuard guard(x);
  const cudnnHandle_t handle = cudnn::handle(x);
  const cudaStream_t stream = stream_of(x);
  const Shape s = shape_of(x, p);
  Descriptors d;
  MPX_CUDNN_CHECK(describe(d, handle, p, x.dtype(), s), kOp);
  size_t wbytes = 0, work_bytes = 0, reserve_bytes = 0;
  MPX_CUDNN_CHECK(cudnnGetRNNWeightSpaceSize(handle, d.rnn, &wbytes), kOp);
  MPX_CUDNN_CHECK(cudnnGetRNNTempSpaceSizes(handle, d.rnn, CUDNN_FWD_MODE_TRAINING, d.x, &work_bytes, &reserve_bytes),
                  kOp);
  MPX_CHECK(weights.defined() && static_cast<size_t>(weights.numel()) == wbytes && reserve.defined() &&
                static_cast<size_t>(reserve.numel()) == reserve_bytes,
            kOp, ": the backward needs the forward's weight and reserve spaces (a forward run in training mode)");
  const Tensor work = cudnn::workspace(x, work_bytes);
  const Tensor lengths = device_lengths(x, s);
  MPX_CUDNN_CHECK(cudnnRNNBackwardData_v8(handle, d.rnn, lengths.data_ptr<int32_t>(), d.y, y.raw_data(), dy.raw_data(),
                                          d.x, dx.raw_data(), d.h, ptr(hx), ptr(dhy), mut(dhx), d.h, ptr(cx),
                                          ptr(dcy), mut(dcx), wbytes, weights.raw_data(), work_bytes, mut(work),
                                          reserve_bytes, reserve.raw_data()),
                  kOp);
  // The weight gradients are added into their space: it starts at zero.
  const Tensor dspace = cudnn::workspace(x, wbytes);
  MPX_CUDA_CHECK(cudaMemsetAsync(dspace.raw_data(), 0, wbytes, stream), kOp);
  MPX_CUDNN_CHECK(cudnnRNNBackwardWeights_v8(handle, d.rnn, CUDNN_WGRAD_MODE_ADD, lengths.data_ptr<int32_t>(), d.x,
                                             x.raw_data(), d.h, ptr(hx), d.y, y.raw_data(), wbytes, dspace.raw_data(),
                                             work_bytes, mut(work), reserve_bytes, reserve.raw_data()),
                  kOp);
  map_weights(handle, d, p, s, dspace.raw_data(), wbytes, dparams, false, x.element_size(), stream);
}

}  // namespace

MPX_REGISTER_KERNELS(cuda_rnn_cudnn) {
  for (DType dt : {kFloat32, kFloat16, kBFloat16, kFloat64}) {
    dispatch::register_kernel<OpId::rnn_fused>(DeviceType::kCUDA, dt, &rnn_forward);
    dispatch::register_kernel<OpId::rnn_fused_backward>(DeviceType::kCUDA, dt, &rnn_backward);
  }
}

}  // namespace mpx::cuda
#endif  // MPX_WITH_CUDNN
