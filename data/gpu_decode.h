// Batched JPEG decoding on a CUDA device with nvJPEG, feeding the ImagePipeline's crops there (ImageFolderOptions::gpu_decode, `mpx train --gpu-decode`).
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/device.h"
#include "core/tensor.h"
#include "data/image_pipeline.h"

namespace mpx::data {

/// Why JPEGs cannot be decoded on `device` ("" when they can): the device is not CUDA, the
/// build has no CUDA backend or no nvJPEG (with how to get it), or the device is not visible.
std::string gpu_decode_problem(Device device);

/// Decodes batches of JPEG files on a CUDA device with nvJPEG and resamples every image's crop
/// there into one batch tensor, as `pipeline` does on the CPU with reduced_decode(false): the
/// same Plan from the same seed (drawn from the JPEG header's size), the same antialiased
/// bilinear weights (computed on the host by aa_bilinear_weights), mirror, normalization, dtype
/// and layout. Only the decode differs: nvJPEG's IDCT and chroma upsampling against
/// libjpeg-turbo's, a few levels at most (docs/data.md).
///
/// A sample nvJPEG cannot take (a PNG or BMP, a CMYK JPEG, a size above max_image_pixels(), a
/// JPEG it rejects) is filled on the host by the caller's fallback and copied in, so a batch
/// never fails for its format, and errors about a file come from the CPU path, naming it.
///
/// One decoder serves one thread at a time: it owns an nvJPEG state, a CUDA stream and its
/// buffers. ImageFolder keeps a pool, one per loading thread.
class GpuJpegDecoder {
 public:
  /// Fills sample k on the host: the pipeline's output_shape() elements of its dtype at `out`.
  using Fallback = std::function<void(size_t k, void* out)>;

  /// Throws mpx::Error with gpu_decode_problem(device) when decoding there is impossible.
  GpuJpegDecoder(ImagePipeline pipeline, Device device);
  ~GpuJpegDecoder();
  GpuJpegDecoder(const GpuJpegDecoder&) = delete;
  GpuJpegDecoder& operator=(const GpuJpegDecoder&) = delete;

  /// Decodes `files` (each a whole file's bytes; empty: straight to the fallback) with the
  /// per-sample `seeds` into a new [N, ...output_shape()] tensor on the device, complete when
  /// this returns. It is allocated on the calling thread's current stream of the device (a
  /// loader thread's: the device's default stream, the one a DevicePrefetcher's consumer runs
  /// on), so its memory is reused only in that stream's order.
  Tensor decode(const std::vector<std::vector<uint8_t>>& files, const std::vector<uint64_t>& seeds,
                const Fallback& fallback);

  /// How many samples of the latest decode() went through the fallback.
  int64_t fallbacks() const;
  Device device() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace mpx::data
