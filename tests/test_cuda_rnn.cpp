// CUDA vs CPU: the fused row norms (layer_norm, rms_norm) and the fused LSTM/GRU cells, forward and
// backward, in every floating dtype, and whole LSTM/GRU modules on the device.
#include <catch2/catch.hpp>

#include <cstdlib>

#include <functional>
#include <string>
#include <tuple>
#include <vector>

#include <mpx/mpx.h>

#include "gradcheck.h"
#include "test_util.h"

using namespace mpx;

namespace {

const std::vector<DType> kFloats = {kFloat32, kFloat16, kBFloat16, kFloat64};

Tensor gpu(const Tensor& t) { return t.to(Device::cuda()); }

Tensor randn_dt(const IntList& shape, DType dt, uint64_t seed, double scale = 1.0, double shift = 0.0) {
  manual_seed(seed);
  return (randn(shape) * scale + shift).to(dt);
}

// The output and the gradients of sum(y * g) for inputs `in` (leaves) computed by f on the CPU and
// on the device from the same values.
void compare(const std::function<Tensor(const tensor_list&)>& f, const tensor_list& in, DType dt,
             const std::string& what) {
  tensor_list c, d;
  for (const Tensor& t : in) {
    c.push_back(t.clone().set_requires_grad(true));
    d.push_back(gpu(t).set_requires_grad(true));
  }
  Tensor yc = f(c), yd = f(d);
  testing::check_cuda_close(yd, yc, dt, what);
  const Tensor g = randn_dt(yc.sizes(), yc.dtype(), 77);
  sum(yc * g).backward();
  sum(yd * gpu(g)).backward();
  for (size_t i = 0; i < in.size(); ++i) {
    INFO("input " << i);
    testing::check_cuda_close(d[i].grad(), c[i].grad(), dt, what + " grad");
  }
}

}  // namespace

TEST_CASE("cuda layer_norm and rms_norm kernels match the CPU forward and backward", "[cuda]") {
  if (!testing::cuda_ready()) return;
  for (DType dt : kFloats)
    for (const IntList& shape : std::vector<IntList>{{4, 10}, {3, 7, 33}, {64, 4097}, {1000, 7}}) {
      INFO(dtype_name(dt) << " " << shape_str(shape));
      const int64_t D = shape.back();
      const DType pd = dt == kFloat64 ? kFloat64 : kFloat32;
      const Tensor x = randn_dt(shape, dt, 1, 2.0, 1.0), w = randn_dt({D}, pd, 2), b = randn_dt({D}, pd, 3);
      compare([D](const tensor_list& t) { return layer_norm(t[0], {D}, t[1], t[2]); }, {x, w, b}, dt, "layer_norm");
      compare([D](const tensor_list& t) { return rms_norm(t[0], {D}, t[1]); }, {x, w}, dt, "rms_norm");
      compare([D](const tensor_list& t) { return rms_norm(t[0], {D}); }, {x}, dt, "rms_norm without weight");
    }
}

TEST_CASE("cuda fused LSTM/GRU cells match the CPU forward and backward", "[cuda]") {
  if (!testing::cuda_ready()) return;
  for (DType dt : kFloats)
    for (int64_t N : {1, 5, 300}) {
      INFO(dtype_name(dt) << " N " << N);
      const int64_t H = 37;
      compare(
          [](const tensor_list& t) {
            auto [h, c] = lstm_cell_fused(t[0], t[1]);
            return cat({h, c}, 1);
          },
          {randn_dt({N, 4 * H}, dt, 4), randn_dt({N, H}, dt, 5)}, dt, "lstm_cell_fused");
      compare([](const tensor_list& t) { return gru_cell_fused(t[0], t[1], t[2]); },
              {randn_dt({N, 3 * H}, dt, 6), randn_dt({N, 3 * H}, dt, 7), randn_dt({N, H}, dt, 8)}, dt,
              "gru_cell_fused");
    }
}

TEST_CASE("cuda LSTM and GRU modules match the CPU (2 layers, bidirectional)", "[cuda]") {
  if (!testing::cuda_ready()) return;
  for (DType dt : {kFloat32, kFloat64}) {
    INFO(dtype_name(dt));
    manual_seed(9);
    nn::LSTM lc(nn::LSTMOptions(8, 16).num_layers(2).bidirectional(true).batch_first(true));
    nn::GRU gc(nn::GRUOptions(8, 16).num_layers(2).bidirectional(true));
    lc->to(dt);
    gc->to(dt);
    nn::LSTM ld(nn::LSTMOptions(8, 16).num_layers(2).bidirectional(true).batch_first(true));
    nn::GRU gd(nn::GRUOptions(8, 16).num_layers(2).bidirectional(true));
    ld->to(dt);
    gd->to(dt);
    ld->load_state_dict(lc->state_dict());
    gd->load_state_dict(gc->state_dict());
    ld->to(Device::cuda());
    gd->to(Device::cuda());
    const Tensor x = randn_dt({4, 6, 8}, dt, 10);
    auto [oc, sc] = lc(x);
    auto [od, sd] = ld(gpu(x));
    testing::check_cuda_close(od, oc, dt, "LSTM output");
    testing::check_cuda_close(std::get<1>(sd), std::get<1>(sc), dt, "LSTM c_n");
    sum(oc).backward();
    sum(od).backward();
    testing::check_cuda_close(ld->flat_weights()[4].grad(), lc->flat_weights()[4].grad(), dt, "LSTM grad");
    auto [goc, ghc] = gc(x);
    auto [god, ghd] = gd(gpu(x));
    testing::check_cuda_close(god, goc, dt, "GRU output");
    testing::check_cuda_close(ghd, ghc, dt, "GRU h_n");
  }
}

// A whole sequence runs as one cuDNN RNN call (no per-step cells) wherever cuDNN takes it: given and
// unbatched states, their gradients, f16; dropout between layers in training runs cell by cell.
TEST_CASE("cuda lstm and gru run one cuDNN sequence, with the CPU's values and gradients", "[cuda]") {
  if (!testing::cuda_ready() || cuda::cudnn_version().rfind("cuDNN", 0) != 0) return;
  const int64_t T = 7, N = 3, I = 5, H = 8;
  for (DType dt : {kFloat32, kFloat16}) {
    for (bool unbatched : {false, true}) {
      INFO(dtype_name(dt) << (unbatched ? " unbatched" : ""));
      const IntList xs = unbatched ? IntList{T, I} : IntList{T, N, I};
      const IntList ss = unbatched ? IntList{2, H} : IntList{2, N, H};
      tensor_list in = {randn_dt(xs, dt, 1), randn_dt(ss, dt, 2), randn_dt(ss, dt, 3)};
      for (int64_t in_size : {I, H})  // two layers: w_ih, w_hh, b_ih, b_hh each
        for (const IntList& shape : {IntList{4 * H, in_size}, IntList{4 * H, H}, IntList{4 * H}, IntList{4 * H}})
          in.push_back(randn_dt(shape, dt, 10 + static_cast<uint64_t>(in.size()), 0.3));
      RnnArgs a;
      a.num_layers = 2;
      auto lstm_out = [a](const tensor_list& t) {
        auto [y, hn, cn] = lstm(t[0], t[1], t[2], tensor_list(t.begin() + 3, t.end()), a);
        return cat({y.flatten(), hn.flatten(), cn.flatten()}, 0);
      };
      profiler::reset();
      profiler::start();
      compare(lstm_out, in, dt, "lstm");
      profiler::stop();
      int64_t fused = 0, cells = 0;
      for (const auto& r : profiler::results()) {
        if (r.op == "rnn_fused" || r.op == "rnn_fused_backward") fused += r.calls;
        if (r.op == "lstm_cell_fused" || r.op == "lstm_cell_fused_backward") cells += r.calls;
      }
      profiler::reset();
      CHECK(fused == 2);  // one forward, one backward
      CHECK(cells == 0);
      // A GRU from the same inputs: gates r, z, n (3H rows), no cell state.
      tensor_list gin = {in[0], in[1]};
      for (int k = 0; k < 2; ++k)
        for (int j = 0; j < 4; ++j) gin.push_back(in[3 + 4 * k + j].narrow(0, 0, 3 * H).contiguous());
      auto gru_out = [a](const tensor_list& t) {
        auto [y, hn] = gru(t[0], t[1], tensor_list(t.begin() + 2, t.end()), a);
        return cat({y.flatten(), hn.flatten()}, 0);
      };
      CHECK(testing::kernel_calls("rnn_fused", [&] { compare(gru_out, gin, dt, "gru"); }) == 1);
    }
  }
  // Dropout between layers in training draws from mpx's generator: cell by cell, as on the CPU.
  nn::LSTM m(nn::LSTMOptions(4, 6).num_layers(2).dropout(0.5));
  m->to(Device::cuda());
  const Tensor x = randn_dt({5, 2, 4}, kFloat32, 4).to(Device::cuda());
  CHECK(testing::kernel_calls("rnn_fused", [&] { (void)m(x); }) == 0);
  m->eval();
  CHECK(testing::kernel_calls("rnn_fused", [&] { (void)m(x); }) == 1);
}

// With MPX_CUDNN_RNN=0 (and wherever cuDNN is not taken) each layer and direction runs as one node over the
// device's GEMM and cell kernels, as on the CPU: values and gradients of every input against the CPU's.
TEST_CASE("cuda lstm and gru step by step (one node per layer and direction) match the CPU", "[cuda]") {
  if (!testing::cuda_ready()) return;
  struct NoCudnnRnn {
    NoCudnnRnn() { setenv("MPX_CUDNN_RNN", "0", 1); }
    ~NoCudnnRnn() { unsetenv("MPX_CUDNN_RNN"); }
  } guard;
  const int64_t T = 6, N = 3, I = 5, H = 8;
  for (DType dt : {kFloat32, kFloat16}) {
    for (bool is_lstm : {true, false}) {
      INFO(dtype_name(dt) << (is_lstm ? " lstm" : " gru"));
      const int64_t G = is_lstm ? 4 : 3;
      tensor_list in = {randn_dt({T, N, I}, dt, 1), randn_dt({4, N, H}, dt, 2), randn_dt({4, N, H}, dt, 3)};
      for (int64_t l = 0; l < 2; ++l)
        for (int d = 0; d < 2; ++d)
          for (const IntList& shape : {IntList{G * H, l == 0 ? I : 2 * H}, IntList{G * H, H}, IntList{G * H}, IntList{G * H}})
            in.push_back(randn_dt(shape, dt, 10 + static_cast<uint64_t>(in.size()), 0.3));
      if (!is_lstm) in.erase(in.begin() + 2);  // no cell state
      RnnArgs a;
      a.num_layers = 2;
      a.bidirectional = true;
      auto f = [a, is_lstm](const tensor_list& t) {
        if (is_lstm) {
          auto [y, hn, cn] = lstm(t[0], t[1], t[2], tensor_list(t.begin() + 3, t.end()), a);
          return cat({y.flatten(), hn.flatten(), cn.flatten()}, 0);
        }
        auto [y, hn] = gru(t[0], t[1], tensor_list(t.begin() + 2, t.end()), a);
        return cat({y.flatten(), hn.flatten()}, 0);
      };
      const char* cell = is_lstm ? "lstm_cell_fused" : "gru_cell_fused";
      // T steps per layer and direction, on the CPU and on the device.
      CHECK(testing::kernel_calls(cell, [&] { compare(f, in, dt, is_lstm ? "lstm" : "gru"); }) == 2 * (2 * 2 * T));
    }
  }
}

// proj_size: cuDNN's RNN is not asked; each layer and direction runs on the device's GEMM and cell kernels and
// projects h with one more product per step.
TEST_CASE("cuda lstm with proj_size matches the CPU (2 layers, bidirectional)", "[cuda]") {
  if (!testing::cuda_ready()) return;
  const int64_t T = 5, N = 3, I = 4, H = 8, P = 3;
  for (DType dt : {kFloat32, kBFloat16}) {
    INFO(dtype_name(dt));
    tensor_list in = {randn_dt({T, N, I}, dt, 1), randn_dt({4, N, P}, dt, 2), randn_dt({4, N, H}, dt, 3)};
    for (int64_t l = 0; l < 2; ++l)
      for (int d = 0; d < 2; ++d)
        for (const IntList& shape : {IntList{4 * H, l == 0 ? I : 2 * P}, IntList{4 * H, P}, IntList{4 * H},
                                     IntList{4 * H}, IntList{P, H}})
          in.push_back(randn_dt(shape, dt, 10 + static_cast<uint64_t>(in.size()), 0.3));
    RnnArgs a;
    a.num_layers = 2;
    a.bidirectional = true;
    a.proj_size = P;
    auto f = [a](const tensor_list& t) {
      auto [y, hn, cn] = lstm(t[0], t[1], t[2], tensor_list(t.begin() + 3, t.end()), a);
      return cat({y.flatten(), hn.flatten(), cn.flatten()}, 0);
    };
    CHECK(testing::kernel_calls("rnn_fused", [&] { compare(f, in, dt, "lstm proj"); }) == 0);
  }
}

// The cuDNN sequence's gradients against central differences (f64 on the device): every input, initial state and
// parameter of two bidirectional layers. The CPU leaves are moved to the device inside the function.
TEST_CASE("cuda lstm and gru on cuDNN: f64 gradcheck", "[cuda][gradcheck]") {
  if (!testing::cuda_ready() || cuda::cudnn_version().rfind("cuDNN", 0) != 0) return;
  const int64_t T = 3, N = 2, I = 3, H = 2, L = 2;
  for (bool is_lstm : {true, false}) {
    INFO((is_lstm ? "lstm" : "gru"));
    const int64_t G = is_lstm ? 4 : 3;
    manual_seed(20);
    auto leaf = [](const IntList& shape) {
      return (randn(shape, TensorOptions(kFloat64)) * 0.5).set_requires_grad(true);
    };
    tensor_list in = {leaf({T, N, I}), leaf({L * 2, N, H}), leaf({L * 2, N, H})};
    for (int64_t l = 0; l < L; ++l)
      for (int d = 0; d < 2; ++d) {
        const int64_t in_size = l == 0 ? I : 2 * H;
        for (const IntList& shape : {IntList{G * H, in_size}, IntList{G * H, H}, IntList{G * H}, IntList{G * H}})
          in.push_back(leaf(shape));
      }
    if (!is_lstm) in[2] = in[2].detach();  // gru has no cell state
    RnnArgs a;
    a.num_layers = L;
    a.bidirectional = true;
    auto f = [&](const tensor_list& t) {
      tensor_list g;
      for (const Tensor& x : t) g.push_back(x.to(Device::cuda()));
      const tensor_list params(g.begin() + 3, g.end());
      if (is_lstm) {
        auto [o, hn, cn] = lstm(g[0], g[1], g[2], params, a);
        return cat({o.reshape({-1}), hn.reshape({-1}), cn.reshape({-1})}, 0).cpu();
      }
      auto [o, hn] = gru(g[0], g[1], params, a);
      return cat({o.reshape({-1}), hn.reshape({-1})}, 0).cpu();
    };
    CHECK(testing::kernel_calls("rnn_fused", [&] { (void)f(in); }) == 1);  // cuDNN, not cells, runs it
    CHECK(testing::gradcheck(f, in) == "");
  }
}
