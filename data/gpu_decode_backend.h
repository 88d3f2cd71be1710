// Internal: the nvJPEG decoder that the CUDA module hands to GpuJpegDecoder (data/gpu_decode.cpp) when it loads.
#pragma once
#include <memory>

#include "data/gpu_decode.h"

namespace mpx::data::detail {

/// One decoder's state in the module (nvJPEG handle and states, a stream, buffers).
struct GpuJpegBackend {
  virtual ~GpuJpegBackend() = default;
  virtual Tensor decode(const std::vector<std::vector<uint8_t>>& files, const std::vector<uint64_t>& seeds,
                        const GpuJpegDecoder::Fallback& fallback) = 0;
  virtual int64_t fallbacks() const = 0;
};

/// What the module offers: whether nvJPEG loads and answers, and a decoder for a device.
struct GpuJpegFactory {
  virtual ~GpuJpegFactory() = default;
  virtual bool available() = 0;
  virtual std::unique_ptr<GpuJpegBackend> make(ImagePipeline pipeline, Device device) = 0;
};

/// Called by the module's static initialization (a module built without nvJPEG installs nothing).
void install_gpu_jpeg(GpuJpegFactory* factory);

}  // namespace mpx::data::detail
