// Pieces of `mpx train` kept apart from its loop: evaluation on the test split and --pretrained weights.
#pragma once
#include <cstdint>
#include <string>

#include "tools/common.h"

namespace mpx::cli {

/// One pass over the test split.
struct EvalResult {
  double loss = 0, top1 = 0, top5 = 0;
  int64_t n = 0, nonfinite = 0;  ///< images, and images whose logits hold NaN or infinity
  double seconds = 0;
  bool stopped = false;  ///< a signal arrived: the result is incomplete
};

/// Evaluates `net` (eval mode, no grad) on every batch; stops early when interrupted(). With several
/// ranks each evaluates its shard and the sums are combined over all of them (every rank must call it).
EvalResult evaluate(const nn::AnyModule& net, data::DevicePrefetcher& batches);

/// Warns on stderr when test images got non-finite logits.
void warn_nonfinite(const EvalResult& r);

/// --pretrained: copies every tensor of the safetensors file at `path` whose name (after a
/// "model." or "module." prefix) and shape fit `m`; the rest keep their initialization. Prints a
/// summary; an mpx::Error when nothing fits or the file cannot be read.
void load_pretrained(nn::Module& m, const std::string& path, const std::string& arch);

}  // namespace mpx::cli
