// cuDNN's sdpa and sdpa_backward graphs for one attention call, built or checked without a device: the one file
// that compiles cuDNN's frontend (heavy headers), shared by the CUDA module and its deviceless test.
#include "ops/cuda/sdpa_cudnn_graph.h"

#ifdef MPX_WITH_CUDNN_FRONTEND
#include <cudnn_frontend.h>

#include <array>
#include <exception>
#include <utility>
#include <vector>

namespace mpx::cuda::cudnn_sdpa {
namespace fe = cudnn_frontend;
namespace {

// A device described rather than asked (deviceless checks): its properties, SM version and count.
struct Target {
  std::shared_ptr<fe::DeviceProperties> device;
  int sm_version = 0, sm_count = 0;
};

// A [n0, n1, n2, n3] view's strides for cuDNN: a size-1 dim takes the dense stride (its own is never read,
// and may be anything, 0 included).
std::vector<int64_t> strides_of(std::array<int64_t, 4> n, const int64_t* st) {
  std::vector<int64_t> s(st, st + 4);
  int64_t dense = 1;
  for (int d = 3; d >= 0; --d) {
    if (n[d] == 1) s[d] = dense;
    dense = s[d] * n[d];
  }
  return s;
}

std::vector<int64_t> dense_strides(std::array<int64_t, 4> n) { return {n[1] * n[2] * n[3], n[2] * n[3], n[3], 1}; }

std::shared_ptr<fe::graph::Tensor_attributes> input(fe::graph::Graph& gr, const char* name, Uid uid,
                                                     std::array<int64_t, 4> n, std::vector<int64_t> strides) {
  return gr.tensor(fe::graph::Tensor_attributes()
                       .set_name(name)
                       .set_uid(uid)
                       .set_dim({n[0], n[1], n[2], n[3]})
                       .set_stride(std::move(strides)));
}

// Q, K, V with g's strides (a size-1 dim's replaced).
std::array<std::shared_ptr<fe::graph::Tensor_attributes>, 3> qkv(fe::graph::Graph& gr, const SdpaGeom& g) {
  return {input(gr, "Q", kQ, {g.B, g.H, g.L, g.E}, strides_of({g.B, g.H, g.L, g.E}, g.sq)),
          input(gr, "K", kK, {g.B, g.Hk, g.S, g.E}, strides_of({g.B, g.Hk, g.S, g.E}, g.sk)),
          input(gr, "V", kV, {g.B, g.Hk, g.S, g.Ev}, strides_of({g.B, g.Hk, g.S, g.Ev}, g.sv))};
}

// The target is set before any node is added: nodes copy the graph's context when they are made.
std::shared_ptr<fe::graph::Graph> new_graph(DType dt, const Target* target) {
  auto gr = std::make_shared<fe::graph::Graph>();
  if (target)
    gr->set_device_properties(target->device).set_sm_version(target->sm_version).set_sm_count(target->sm_count);
  gr->set_io_data_type(dt == kFloat16 ? fe::DataType_t::HALF : fe::DataType_t::BFLOAT16)
      .set_intermediate_data_type(fe::DataType_t::FLOAT)
      .set_compute_data_type(fe::DataType_t::FLOAT);
  return gr;
}

// O dense, Stats dense [B, H, L, 1] in f32.
std::shared_ptr<fe::graph::Graph> forward_graph(DType dt, const SdpaGeom& g, const Target* target) {
  auto gr = new_graph(dt, target);
  auto [Q, K, V] = qkv(*gr, g);
  auto opts = fe::graph::SDPA_attributes().set_name("sdpa").set_generate_stats(true).set_attn_scale(
      static_cast<float>(g.scale));
  // PyTorch's is_causal: key j hidden from query i when j > i, counted from the top-left corner.
  if (g.causal) opts.set_diagonal_alignment(fe::DiagonalAlignment_t::TOP_LEFT).set_diagonal_band_right_bound(0);
  auto [O, Stats] = gr->sdpa(Q, K, V, opts);
  O->set_output(true).set_uid(kO).set_dim({g.B, g.H, g.L, g.Ev}).set_stride(dense_strides({g.B, g.H, g.L, g.Ev}));
  Stats->set_output(true)
      .set_uid(kStats)
      .set_data_type(fe::DataType_t::FLOAT)
      .set_dim({g.B, g.H, g.L, 1})
      .set_stride({g.H * g.L, g.L, 1, 1});
  return gr;
}

// O, dO and Stats dense; dQ, dK, dV dense.
std::shared_ptr<fe::graph::Graph> backward_graph(DType dt, const SdpaGeom& g, bool deterministic,
                                                 const Target* target) {
  auto gr = new_graph(dt, target);
  auto [Q, K, V] = qkv(*gr, g);
  auto O = input(*gr, "O", kO, {g.B, g.H, g.L, g.Ev}, dense_strides({g.B, g.H, g.L, g.Ev}));
  auto dO = input(*gr, "dO", kdO, {g.B, g.H, g.L, g.Ev}, dense_strides({g.B, g.H, g.L, g.Ev}));
  auto Stats = input(*gr, "Stats", kStats, {g.B, g.H, g.L, 1}, {g.H * g.L, g.L, 1, 1});
  Stats->set_data_type(fe::DataType_t::FLOAT);
  auto opts = fe::graph::SDPA_backward_attributes()
                  .set_name("sdpa_backward")
                  .set_attn_scale(static_cast<float>(g.scale))
                  .set_deterministic_algorithm(deterministic);
  if (g.causal) opts.set_diagonal_alignment(fe::DiagonalAlignment_t::TOP_LEFT).set_diagonal_band_right_bound(0);
  auto [dQ, dK, dV] = gr->sdpa_backward(Q, K, V, O, dO, Stats, opts);
  dQ->set_output(true).set_uid(kdQ).set_dim({g.B, g.H, g.L, g.E}).set_stride(dense_strides({g.B, g.H, g.L, g.E}));
  dK->set_output(true).set_uid(kdK).set_dim({g.B, g.Hk, g.S, g.E}).set_stride(dense_strides({g.B, g.Hk, g.S, g.E}));
  dV->set_output(true).set_uid(kdV).set_dim({g.B, g.Hk, g.S, g.Ev}).set_stride(dense_strides({g.B, g.Hk, g.S, g.Ev}));
  return gr;
}

std::string message(fe::error_t st) {
  return st.get_message().empty() ? std::string("not supported") : st.get_message();
}

// Validates a graph and takes it through cuDNN's heuristics (then its fallback list) to cuDNN's support check,
// for the handle's device or, with no handle, the device the graph describes.
fe::error_t supported(fe::graph::Graph& gr, cudnnHandle_t h) {
  fe::error_t st = gr.validate();
  if (st.is_good()) st = h ? gr.build_operation_graph(h) : gr.build_operation_graph();
  if (st.is_good()) st = gr.create_execution_plans({fe::HeurMode_t::A, fe::HeurMode_t::FALLBACK});
  if (st.is_good()) st = h ? gr.check_support(h) : gr.check_support();
  return st;
}

}  // namespace

struct Plan::Impl {
  std::shared_ptr<fe::graph::Graph> graph;
  int64_t workspace = 0;
};

Plan::Plan() : impl_(std::make_unique<Impl>()) {}
Plan::~Plan() = default;

std::unique_ptr<Plan> Plan::build(bool backward, DType dt, const SdpaGeom& g, bool deterministic, cudnnHandle_t h,
                                   std::string& why) {
  auto out = std::unique_ptr<Plan>(new Plan);
  try {
    auto& gr = out->impl_->graph;
    gr = backward ? backward_graph(dt, g, deterministic, nullptr) : forward_graph(dt, g, nullptr);
    fe::error_t st = supported(*gr, h);
    if (st.is_good()) st = gr->build_plans(h);
    if (st.is_good()) st = gr->get_workspace_size(out->impl_->workspace);
    if (st.is_good()) return out;
    why = message(st);
  } catch (const std::exception& e) {  // the frontend reports through its return values; this is a backstop
    why = e.what();
  }
  return nullptr;
}

int64_t Plan::workspace() const { return impl_->workspace; }

std::string Plan::execute(cudnnHandle_t h, std::unordered_map<int64_t, void*>& pack, void* workspace) const {
  fe::error_t st = impl_->graph->execute(h, pack, workspace);
  return st.is_good() ? std::string() : message(st);
}

std::string check_deviceless(DType dt, const SdpaGeom& g, bool backward, bool deterministic,
                             const std::string& device_json, int sm_version, int sm_count) {
  try {
    Target t{std::make_shared<fe::DeviceProperties>(), sm_version, sm_count};
    const std::vector<uint8_t> json(device_json.begin(), device_json.end());
    fe::error_t st = t.device->deserialize(json);
    if (st.is_bad()) return "device description: " + st.get_message();
    auto gr = backward ? backward_graph(dt, g, deterministic, &t) : forward_graph(dt, g, &t);
    st = supported(*gr, nullptr);
    return st.is_good() ? std::string() : message(st);
  } catch (const std::exception& e) {
    return e.what();
  }
}

}  // namespace mpx::cuda::cudnn_sdpa
#endif  // MPX_WITH_CUDNN_FRONTEND
