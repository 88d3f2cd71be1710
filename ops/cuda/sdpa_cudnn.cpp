// Runs f16/bf16 attention on cuDNN's fused kernels: one cuDNN graph (sdpa or sdpa_backward) per shape, built once.
#include "ops/cuda/sdpa_cudnn.h"

#ifdef MPX_WITH_CUDNN_FRONTEND
#include <array>
#include <atomic>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>

#include "core/cuda.h"
#include "ops/cuda/cudnn_common.h"
#include "ops/cuda/sdpa_cudnn_graph.h"
#include "ops/op_utils.h"
#endif

namespace mpx::cuda {

#ifndef MPX_WITH_CUDNN_FRONTEND

bool sdpa_cudnn_forward(const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                        const SdpaGeom&) {
  return false;
}
bool sdpa_cudnn_backward(const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                         const Tensor&, const Tensor&, const Tensor&, const Tensor&, const SdpaGeom&) {
  return false;
}

#else

namespace {
using namespace cudnn_sdpa;

// A graph built for one shape and handle, or the remembered refusal. Handles are per thread, so no two threads
// execute one plan.
struct Built {
  std::unique_ptr<Plan> plan;
  std::atomic<bool> refused{false};
};

using Key = std::array<int64_t, 24>;

Key make_key(bool backward, DType dt, const SdpaGeom& g, cudnnHandle_t h, bool deterministic) {
  Key k{};
  int i = 0;
  k[i++] = backward;
  k[i++] = static_cast<int64_t>(dt);
  for (int64_t v : {g.B, g.H, g.Hk, g.L, g.S, g.E, g.Ev}) k[i++] = v;
  for (const int64_t* st : {g.sq, g.sk, g.sv})
    for (int d = 0; d < 3; ++d) k[i++] = st[d];
  float scale = static_cast<float>(g.scale);
  int32_t bits = 0;
  std::memcpy(&bits, &scale, sizeof bits);
  k[i++] = bits;
  k[i++] = g.causal;
  k[i++] = deterministic;
  k[i++] = reinterpret_cast<int64_t>(h);  // plans are bound to the handle (and so the device) that built them
  return k;
}

std::string describe(bool backward, DType dt, const SdpaGeom& g) {
  std::string s = backward ? "sdpa_fused_backward" : "sdpa_fused";
  s += std::string(" (cuDNN fused attention) ") + dtype_name(dt) + " q [" + std::to_string(g.B) + ", " +
       std::to_string(g.H) + ", " + std::to_string(g.L) + ", " + std::to_string(g.E) + "], k/v heads " +
       std::to_string(g.Hk) + ", keys " + std::to_string(g.S) + ", value dim " + std::to_string(g.Ev) +
       (g.causal ? ", causal" : "");
  return s;
}

// Distinct shapes given plans per process: building one can take a second (cuDNN compiles some kernels at run
// time), so a model whose lengths keep changing runs the flash kernels past this many.
constexpr size_t kMaxPlans = 64;

// The graph for this call, built on first use; null when cuDNN refused it (now or before), or when the shape is
// new and building is not worth it or not possible: a call not recorded for a backward (under no_grad, as when
// sampling text one length after another), a CUDA graph capture under way (building queries the device), or
// kMaxPlans shapes built already.
Built* graph_for(bool backward, DType dt, const SdpaGeom& g, cudnnHandle_t h, bool deterministic) {
  static std::mutex mu;
  static std::map<Key, std::unique_ptr<Built>> cache;
  static bool told = false;
  const Key key = make_key(backward, dt, g, h, deterministic);
  {
    std::lock_guard<std::mutex> l(mu);
    if (auto it = cache.find(key); it != cache.end()) return it->second->refused ? nullptr : it->second.get();
    if (cache.size() >= kMaxPlans) {
      if (!told)
        cudnn::count_fallback(describe(backward, dt, g) + ": more than " + std::to_string(kMaxPlans) +
                                  " attention shapes; new ones run mpx's flash kernels",
                              CUDNN_STATUS_SUCCESS);
      told = true;
      return nullptr;
    }
  }
  if (!(backward || g.recorded) || is_capturing()) return nullptr;
  auto b = std::make_unique<Built>();
  std::string why;
  b->plan = Plan::build(backward, dt, g, deterministic, h, why);
  if (!b->plan) {
    b->refused = true;
    cudnn::count_fallback(describe(backward, dt, g) + ": " + why, CUDNN_STATUS_SUCCESS);
  }
  std::lock_guard<std::mutex> l(mu);
  auto& slot = cache[key];
  if (!slot) slot = std::move(b);
  return slot->refused ? nullptr : slot.get();
}

// Runs a built graph; a failure to launch is counted and remembered, and the caller's kernels run instead.
bool execute(Built& b, bool backward, DType dt, const SdpaGeom& g, cudnnHandle_t h, const Tensor& like,
             std::unordered_map<int64_t, void*>& pack) {
  const Tensor ws = cudnn::workspace(like, static_cast<size_t>(b.plan->workspace()));
  const std::string why = b.plan->execute(h, pack, ws.defined() ? ws.raw_data() : nullptr);
  if (why.empty()) return true;
  cudnn::count_fallback(describe(backward, dt, g) + ": execute: " + why, CUDNN_STATUS_SUCCESS);
  b.refused = true;
  return false;
}

}  // namespace

bool sdpa_cudnn_forward(const Tensor& out, const Tensor& lse, const Tensor& q, const Tensor& k, const Tensor& v,
                        const Tensor& mask, const SdpaGeom& g) {
  const DType dt = q.dtype();
  if (!cudnn_sdp_enabled() ||
      sdpa_cudnn_refusal(dt, g, mask.defined(), {q.raw_data(), k.raw_data(), v.raw_data(), out.raw_data(),
                                                 lse.raw_data()}) != nullptr)
    return false;
  cudnnHandle_t h = cudnn::handle(out);
  Built* b = graph_for(false, dt, g, h, false);
  if (!b) return false;
  std::unordered_map<int64_t, void*> pack = {
      {kQ, q.raw_data()}, {kK, k.raw_data()}, {kV, v.raw_data()}, {kO, out.raw_data()}, {kStats, lse.raw_data()}};
  return execute(*b, false, dt, g, h, out, pack);
}

bool sdpa_cudnn_backward(const Tensor& dq, const Tensor& dk, const Tensor& dv, const Tensor& dout, const Tensor& q,
                         const Tensor& k, const Tensor& v, const Tensor& out, const Tensor& lse, const Tensor& mask,
                         const SdpaGeom& g) {
  const DType dt = q.dtype();
  if (!cudnn_sdp_enabled() ||
      sdpa_cudnn_refusal(dt, g, mask.defined(),
                         {q.raw_data(), k.raw_data(), v.raw_data(), out.raw_data(), lse.raw_data(), dout.raw_data(),
                          dq.raw_data(), dk.raw_data(), dv.raw_data()}) != nullptr)
    return false;
  cudnnHandle_t h = cudnn::handle(dq);
  Built* b = graph_for(true, dt, g, h, cudnn_deterministic_enabled());
  if (!b) return false;
  std::unordered_map<int64_t, void*> pack = {{kQ, q.raw_data()},    {kK, k.raw_data()},     {kV, v.raw_data()},
                                             {kO, out.raw_data()},  {kdO, dout.raw_data()}, {kStats, lse.raw_data()},
                                             {kdQ, dq.raw_data()},  {kdK, dk.raw_data()},   {kdV, dv.raw_data()}};
  return execute(*b, true, dt, g, h, dq, pack);
}

#endif  // MPX_WITH_CUDNN_FRONTEND

}  // namespace mpx::cuda
