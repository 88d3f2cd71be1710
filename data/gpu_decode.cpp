// GpuJpegDecoder in libmpx: checks whether decoding on a device can work and forwards to the nvJPEG decoder of the CUDA module.
#include "data/gpu_decode.h"

#include <atomic>
#include <utility>

#include "core/cuda_backend.h"
#include "core/error.h"
#include "data/gpu_decode_backend.h"
#include "data/jpeg.h"

namespace mpx::data {
namespace detail {
namespace {
std::atomic<GpuJpegFactory*> g_factory{nullptr};
}
void install_gpu_jpeg(GpuJpegFactory* factory) { g_factory.store(factory); }
}  // namespace detail

namespace {
detail::GpuJpegFactory* factory() {
  if (!cuda::detail::backend()) return nullptr;  // loads the module, which installs the factory
  return detail::g_factory.load();
}
}  // namespace

bool have_nvjpeg() {
  detail::GpuJpegFactory* f = factory();
  return f && f->available();
}

std::string gpu_decode_problem(Device device) {
  if (!device.is_cuda()) return "GPU decoding needs a CUDA device, got " + device.str();
#ifndef MPX_WITH_CUDA
  return "this mpx was built without the CUDA backend; rebuild with -DMPX_CUDA=ON where nvcc is installed";
#else
  if (!cuda::detail::backend()) return cuda::detail::module_problem();
  if (!have_nvjpeg())
    return "this mpx has no nvJPEG (`mpx info` says why); run tools/install-deps.sh, which fetches NVIDIA's nvJPEG "
           "where the CUDA toolkit lacks it, then reconfigure with -DMPX_NVJPEG=ON and rebuild";
  const int n = cuda_device_count();
  if (device.index < 0 || device.index >= n)
    return device.str() + " is not visible (" + std::to_string(n) + " CUDA device(s); driver missing or "
           "CUDA_VISIBLE_DEVICES empty?)";
  return "";
#endif
}

struct GpuJpegDecoder::Impl {
  Device device;
  std::unique_ptr<detail::GpuJpegBackend> backend;
};

GpuJpegDecoder::GpuJpegDecoder(ImagePipeline pipeline, Device device) {
  const std::string why = gpu_decode_problem(device);
  MPX_CHECK(why.empty(), "GpuJpegDecoder: cannot decode on ", device.str(), ": ", why);
  impl_ = std::make_unique<Impl>(Impl{device, factory()->make(std::move(pipeline), device)});
}
GpuJpegDecoder::~GpuJpegDecoder() = default;
Tensor GpuJpegDecoder::decode(const std::vector<std::vector<uint8_t>>& files, const std::vector<uint64_t>& seeds,
                              const Fallback& fallback) {
  return impl_->backend->decode(files, seeds, fallback);
}
int64_t GpuJpegDecoder::fallbacks() const { return impl_->backend->fallbacks(); }
Device GpuJpegDecoder::device() const { return impl_->device; }

}  // namespace mpx::data
