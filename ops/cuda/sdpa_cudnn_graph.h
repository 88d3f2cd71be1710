// cuDNN's sdpa and sdpa_backward graphs for one attention call (through cuDNN's frontend), and cuDNN's support check on them without a device.
#pragma once
#ifdef MPX_WITH_CUDNN_FRONTEND
#include <cudnn_frontend.h>

#include <cstdint>
#include <memory>
#include <string>

#include "core/dtype.h"
#include "ops/cuda/attention_launch.h"

namespace mpx::cuda::cudnn_sdpa {
namespace fe = cudnn_frontend;

/// Tensor uids of the two graphs' variant packs.
enum Uid : int64_t { kQ = 1, kK, kV, kO, kStats, kdO, kdQ, kdK, kdV };

/// A device described rather than asked (deviceless checks): its properties, SM version and count.
struct Target {
  std::shared_ptr<fe::DeviceProperties> device;
  int sm_version = 0, sm_count = 0;
};

/// The forward: Q, K, V with g's strides (a size-1 dim's replaced), O dense [B, H, L, Ev], Stats dense
/// [B, H, L, 1] in f32 (each row's natural-log log-sum-exp of the scaled, masked scores, as mpx's lse).
std::shared_ptr<fe::graph::Graph> forward_graph(DType dt, const SdpaGeom& g, const Target* target = nullptr);
/// The backward: Q, K, V as above, O, dO and Stats dense; dQ, dK, dV dense. dQ is summed with atomics
/// unless `deterministic`.
std::shared_ptr<fe::graph::Graph> backward_graph(DType dt, const SdpaGeom& g, bool deterministic,
                                                 const Target* target = nullptr);
/// Validates a graph and builds it for the handle's device through to its execution plans (cuDNN's
/// heuristics, then its fallback list): "" when built, else the frontend's message.
std::string build(fe::graph::Graph& gr, cudnnHandle_t h);
/// For tests without a GPU: the same graph checked against a device described by cuDNN's device-property
/// JSON, through cuDNN's support check but not its kernels' compilation (cuDNN 9.11+; the engines cuDNN
/// compiles at run time also need a libcuda to load, and the toolkit's stub will do). "" when cuDNN
/// would take the call on that device, else why not.
std::string check_deviceless(DType dt, const SdpaGeom& g, bool backward, bool deterministic,
                             const std::string& device_json, int sm_version, int sm_count);

}  // namespace mpx::cuda::cudnn_sdpa
#endif  // MPX_WITH_CUDNN_FRONTEND
