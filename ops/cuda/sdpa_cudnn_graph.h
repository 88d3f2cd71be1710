// cuDNN's fused attention graphs (sdpa, sdpa_backward) for one call, built once per shape, and cuDNN's support check on them without a device.
#pragma once
#ifdef MPX_WITH_CUDNN_FRONTEND
#include <cudnn.h>

#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>

#include "core/dtype.h"
#include "ops/cuda/attention_launch.h"

namespace mpx::cuda::cudnn_sdpa {

/// Tensor uids of the graphs' variant packs.
enum Uid : int64_t { kQ = 1, kK, kV, kO, kStats, kdO, kdQ, kdK, kdV };

/// One cuDNN graph built for a call's shape on one device. The forward reads Q, K, V with g's strides
/// and writes O dense [B, H, L, Ev] and Stats dense [B, H, L] in f32 (each row's natural-log log-sum-exp
/// of the scaled, masked scores, as mpx's lse); the backward reads Q, K, V so, O, dO and Stats dense, and
/// writes dQ, dK, dV dense (dQ summed with atomics unless deterministic). Only this file's source sees
/// cuDNN's frontend.
class Plan {
 public:
  /// Validates the graph and builds it for the handle's device through to its execution plans (cuDNN's
  /// heuristics, then its fallback list); null with `why` set when cuDNN will not take it.
  static std::unique_ptr<Plan> build(bool backward, DType dt, const SdpaGeom& g, bool deterministic,
                                     cudnnHandle_t h, std::string& why);
  ~Plan();
  Plan(const Plan&) = delete;
  Plan& operator=(const Plan&) = delete;
  /// Bytes of scratch an execution needs.
  int64_t workspace() const;
  /// Enqueues one execution on the handle's stream: "" or the frontend's message.
  std::string execute(cudnnHandle_t h, std::unordered_map<int64_t, void*>& pack, void* workspace) const;

 private:
  Plan();
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

/// For tests without a GPU: the same graph checked against a device described by cuDNN's device-property
/// JSON, through cuDNN's support check but not its kernels' compilation (cuDNN 9.11+; the engines cuDNN
/// compiles at run time also need a libcuda to load, and the toolkit's stub will do). "" when cuDNN
/// would take the call on that device, else why not.
std::string check_deviceless(DType dt, const SdpaGeom& g, bool backward, bool deterministic,
                             const std::string& device_json, int sm_version, int sm_count);

}  // namespace mpx::cuda::cudnn_sdpa
#endif  // MPX_WITH_CUDNN_FRONTEND
