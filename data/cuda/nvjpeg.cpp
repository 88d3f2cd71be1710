// The CUDA module's nvJPEG decoder behind GpuJpegDecoder: nvJPEG's batched decode of a batch's JPEGs on the device, the crops resampled there by one kernel (data/cuda/resample_batch.cu), other files through the CPU fallback.
#include <algorithm>
#include <climits>
#include <cstring>
#include <string>
#include <utility>

#include "core/error.h"
#include "data/datasets.h"
#include <nvjpeg.h>

#include "core/cuda.h"
#include "core/cuda_check.h"
#include "data/gpu_decode_backend.h"
#include "data/jpeg.h"
#include "data/resample_batch.h"

namespace mpx::data {
namespace {

bool nvjpeg_answers() {
  // Linked is not enough: the library must load and answer (a driver may be missing at run time).
  int major = 0;
  return nvjpegGetProperty(MAJOR_VERSION, &major) == NVJPEG_STATUS_SUCCESS && major > 0;
}

const char* status_name(nvjpegStatus_t s) {
  switch (s) {
    case NVJPEG_STATUS_SUCCESS: return "success";
    case NVJPEG_STATUS_NOT_INITIALIZED: return "not initialized";
    case NVJPEG_STATUS_INVALID_PARAMETER: return "invalid parameter";
    case NVJPEG_STATUS_BAD_JPEG: return "bad JPEG";
    case NVJPEG_STATUS_JPEG_NOT_SUPPORTED: return "JPEG not supported";
    case NVJPEG_STATUS_ALLOCATOR_FAILURE: return "allocator failure (out of memory?)";
    case NVJPEG_STATUS_EXECUTION_FAILED: return "execution failed";
    case NVJPEG_STATUS_ARCH_MISMATCH: return "architecture mismatch (GPU not supported)";
    case NVJPEG_STATUS_INTERNAL_ERROR: return "internal error";
    case NVJPEG_STATUS_IMPLEMENTATION_NOT_SUPPORTED: return "implementation not supported";
    default: return "unknown status";
  }
}

void nvjpeg_check(nvjpegStatus_t s, const char* call) {
  MPX_CHECK(s == NVJPEG_STATUS_SUCCESS, "GPU JPEG decode: ", call, " failed: nvJPEG status ", static_cast<int>(s), " (",
            status_name(s), ")");
}

// Decoded images start 256-byte aligned in the pixel buffer, as cudaMalloc'd buffers would.
int64_t aligned(int64_t n) { return (n + 255) / 256 * 256; }

// A JPEG nvJPEG takes: its header, parsed by nvJPEG, declares 1 or 3 components (batched decoding
// has no CMYK/YCCK) and a size within max_image_pixels() (checked before any decoding, as the
// CPU path does). Everything else, PNG and BMP included, goes to the fallback.
bool gpu_header(nvjpegHandle_t h, const std::vector<uint8_t>& f, int& width, int& height) {
  if (f.size() < 4 || f[0] != 0xFF || f[1] != 0xD8) return false;
  int nc = 0;
  nvjpegChromaSubsampling_t ss = NVJPEG_CSS_UNKNOWN;
  int ws[NVJPEG_MAX_COMPONENT] = {}, hs[NVJPEG_MAX_COMPONENT] = {};
  if (nvjpegGetImageInfo(h, f.data(), f.size(), &nc, &ss, ws, hs) != NVJPEG_STATUS_SUCCESS) return false;
  if ((nc != 1 && nc != 3) || ss == NVJPEG_CSS_UNKNOWN || ws[0] <= 0 || hs[0] <= 0) return false;
  if (static_cast<int64_t>(ws[0]) * hs[0] > max_image_pixels()) return false;
  width = ws[0], height = hs[0];
  return true;
}

struct NvJpegDecoder final : detail::GpuJpegBackend {
  ImagePipeline pipeline;
  Device device;
  nvjpegHandle_t handle = nullptr;
  // Two states: a failed batch leaves `batched` to be re-initialized, and the one-by-one retry
  // decodes with `single` meanwhile.
  nvjpegJpegState_t batched = nullptr, single = nullptr;
  int batched_size = -1;  // the size `batched` was initialized for (-1: must re-initialize)
  cuda::Stream stream;
  int64_t fallback_count = 0;

  NvJpegDecoder(ImagePipeline p, Device d) : pipeline(std::move(p)), device(d) {}
  // Apart from the constructor, so that what a failure leaves behind is released by the destructor.
  void open() {
    cuda::DeviceGuard on(device.index);
    nvjpeg_check(nvjpegCreateSimple(&handle), "nvjpegCreateSimple");
    nvjpeg_check(nvjpegJpegStateCreate(handle, &batched), "nvjpegJpegStateCreate");
    nvjpeg_check(nvjpegJpegStateCreate(handle, &single), "nvjpegJpegStateCreate");
    stream = cuda::new_stream(device.index);
  }
  ~NvJpegDecoder() override {
    // Nothing to report from a destructor; the states go before the handle that made them.
    if (single) nvjpegJpegStateDestroy(single);
    if (batched) nvjpegJpegStateDestroy(batched);
    if (handle) nvjpegDestroy(handle);
  }

  // nvjpegDecodeBatched on this stream; false when nvJPEG refused the batch (it does not say
  // which image), after which the state must be initialized again.
  bool decode_batched(const std::vector<const unsigned char*>& data, const std::vector<size_t>& len,
                      std::vector<nvjpegImage_t>& dst) {
    const int n = static_cast<int>(data.size());
    const auto s = static_cast<cudaStream_t>(stream.handle);
    if (batched_size != n) {
      batched_size = -1;
      if (nvjpegDecodeBatchedInitialize(handle, batched, n, 1, NVJPEG_OUTPUT_RGBI) != NVJPEG_STATUS_SUCCESS) return false;
      batched_size = n;
    }
    if (nvjpegDecodeBatched(handle, batched, data.data(), len.data(), dst.data(), s) == NVJPEG_STATUS_SUCCESS) return true;
    batched_size = -1;
    return false;
  }

  int64_t fallbacks() const override { return fallback_count; }
  Tensor decode(const std::vector<std::vector<uint8_t>>& files, const std::vector<uint64_t>& seeds,
                const GpuJpegDecoder::Fallback& fallback) override;
};

Tensor NvJpegDecoder::decode(const std::vector<std::vector<uint8_t>>& files, const std::vector<uint64_t>& seeds,
                             const GpuJpegDecoder::Fallback& fallback) {
  NvJpegDecoder& m = *this;
  const size_t n = files.size();
  MPX_CHECK(seeds.size() == n, "GpuJpegDecoder::decode: ", n, " files but ", seeds.size(), " seeds");
  MPX_CHECK(n > 0 && n < static_cast<size_t>(INT_MAX), "GpuJpegDecoder::decode: bad batch size ", n);
  const ImagePipeline& p = m.pipeline;
  cuda::DeviceGuard on_device(m.device.index);
  const cuda::Stream consumer = cuda::current_stream(m.device.index);
  const auto s = static_cast<cudaStream_t>(m.stream.handle);

  // 1. Headers: which samples nvJPEG decodes, each one's plan and place in the pixel buffer.
  struct Item {
    size_t k;
    int w, h;
    int64_t src;
  };
  std::vector<Item> gpu;
  std::vector<size_t> host;
  int64_t total = 0;
  for (size_t k = 0; k < n; ++k) {
    int w = 0, h = 0;
    if (!gpu_header(m.handle, files[k], w, h)) {
      host.push_back(k);
      continue;
    }
    gpu.push_back({k, w, h, total});
    total += aligned(static_cast<int64_t>(w) * h * 3);
  }

  const IntList sample_shape = p.output_shape();
  IntList shape = sample_shape;
  shape.insert(shape.begin(), static_cast<int64_t>(n));
  const int64_t out_h = p.channels_last() ? sample_shape[0] : sample_shape[1];
  const int64_t out_w = p.channels_last() ? sample_shape[1] : sample_shape[2];
  const size_t each = static_cast<size_t>(sample_shape[0] * sample_shape[1] * sample_shape[2]) * element_size(p.dtype());

  // Everything below is queued on this decoder's stream (temporaries are allocated and freed
  // there). On an error the stream is drained before unwinding, so no queued copy still reads
  // the caller's file bytes or writes a buffer being freed.
  cuda::StreamGuard on_stream(m.stream);
  Tensor out;  // outlives the catch below, so it is freed only after the stream has drained
  try {
    // 2. The full-size decodes, RGB interleaved, all in one batched call when nvJPEG takes the
    // batch; otherwise one by one, and those it rejects go to the fallback.
    Tensor pixels;
    if (!gpu.empty()) {
      pixels = empty({total}, TensorOptions(kUInt8).device(m.device));
      auto* base = static_cast<unsigned char*>(pixels.raw_data());
      std::vector<nvjpegImage_t> dst(gpu.size());
      std::vector<const unsigned char*> data(gpu.size());
      std::vector<size_t> len(gpu.size());
      for (size_t i = 0; i < gpu.size(); ++i) {
        std::memset(&dst[i], 0, sizeof dst[i]);
        dst[i].channel[0] = base + gpu[i].src;
        dst[i].pitch[0] = static_cast<size_t>(gpu[i].w) * 3;
        data[i] = files[gpu[i].k].data();
        len[i] = files[gpu[i].k].size();
      }
      if (!m.decode_batched(data, len, dst)) {
        std::vector<Item> ok;
        for (size_t i = 0; i < gpu.size(); ++i) {
          if (nvjpegDecode(m.handle, m.single, data[i], len[i], NVJPEG_OUTPUT_RGBI, &dst[i], s) == NVJPEG_STATUS_SUCCESS)
            ok.push_back(gpu[i]);
          else
            host.push_back(gpu[i].k);
        }
        gpu = std::move(ok);
      }
    }

    // 3. The rest on the host, before anything is written into the batch: a fallback may throw
    // (a corrupt file without skip_corrupt), and then no device work refers to the output.
    std::sort(host.begin(), host.end());
    std::vector<uint8_t> host_out(host.size() * each);
    for (size_t j = 0; j < host.size(); ++j) fallback(host[j], host_out.data() + j * each);

    // 4. The CPU path's plans and full-size weights, packed for one copy.
    ResampleBatch rb(out_h, out_w);
    for (const Item& it : gpu) {
      const ImagePipeline::Plan plan = p.plan(it.h, it.w, seeds[it.k]);
      const auto wts = p.weights(plan, 8, it.h, it.w);
      rb.add(wts.first, wts.second, it.src, static_cast<int64_t>(it.w) * 3, static_cast<int64_t>(it.k), plan.flip);
    }
    const ResampleBatch::Packed pk = rb.pack();
    Tensor table;
    if (rb.size() > 0) {
      table = empty({static_cast<int64_t>(pk.bytes.size())}, TensorOptions(kUInt8).device(m.device));
      MPX_CUDA_CHECK(cudaMemcpyAsync(table.raw_data(), pk.bytes.data(), pk.bytes.size(), cudaMemcpyHostToDevice, s),
                     "GPU JPEG decode");
    }

    // 5. The batch lives on the consumer's stream, where it will be freed; this stream waits for
    // its allocation before writing into it. (That wait also covers the consumer's work queued
    // so far, a training step at most: the loader thread waits, not the training.)
    {
      cuda::StreamGuard on_consumer(consumer);
      out = empty(shape, TensorOptions(p.dtype()).device(m.device));
    }
    cuda::Event allocated(false);
    allocated.record(consumer);
    allocated.wait(m.stream);
    if (rb.size() > 0)
      launch_resample_batch(static_cast<const uint8_t*>(table.raw_data()), pk.ints_at, pk.weights_at,
                            static_cast<int64_t>(rb.size()), out_h, out_w, static_cast<const uint8_t*>(pixels.raw_data()),
                            p.output(false), out.raw_data(), m.stream.handle);
    auto* dst = static_cast<uint8_t*>(out.raw_data());
    for (size_t j = 0; j < host.size(); ++j)
      MPX_CUDA_CHECK(cudaMemcpyAsync(dst + host[j] * each, host_out.data() + j * each, each, cudaMemcpyHostToDevice, s),
                     "GPU JPEG decode");
    // Finished before the loader hands the batch on: the consumer reads it on other streams.
    m.stream.synchronize();
    m.fallback_count = static_cast<int64_t>(host.size());
    return out;
  } catch (...) {
    cudaStreamSynchronize(s);
    cudaGetLastError();
    throw;
  }
}

struct NvJpegFactory final : detail::GpuJpegFactory {
  bool available() override { return nvjpeg_answers(); }
  std::unique_ptr<detail::GpuJpegBackend> make(ImagePipeline pipeline, Device device) override {
    auto d = std::make_unique<NvJpegDecoder>(std::move(pipeline), device);
    d->open();
    return d;
  }
};

struct Install {
  Install() {
    static NvJpegFactory factory;
    detail::install_gpu_jpeg(&factory);
  }
} install;

}  // namespace
}  // namespace mpx::data
