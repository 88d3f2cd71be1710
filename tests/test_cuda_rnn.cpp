// CUDA vs CPU: the fused row norms (layer_norm, rms_norm) and the fused LSTM/GRU cells, forward and
// backward, in every floating dtype, and whole LSTM/GRU modules on the device.
#include <catch2/catch.hpp>

#include <functional>
#include <string>
#include <tuple>
#include <vector>

#include <mpx/mpx.h>

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
