// `mpx info`: version, build options, distributed and JPEG backends, CPU features and threads, CUDA and devices.

#include <cstdio>
#include <string>
#include <thread>

#include "core/cuda_backend.h"
#include "data/jpeg.h"
#include "ops/backends.h"
#include "tools/commands.h"
#include "tools/common.h"

namespace mpx::cli {

namespace {

// One "yes"/"no" per feature the CPU kernels can use; the compiler asks CPUID for us.
std::string cpu_features() {
  std::string s;
#if defined(__x86_64__) || defined(__i386__)
  __builtin_cpu_init();
  auto add = [&](const char* name, bool on) { s += std::string(s.empty() ? "" : " ") + name + (on ? "" : "(no)"); };
  add("SSE4.2", __builtin_cpu_supports("sse4.2"));
  add("AVX", __builtin_cpu_supports("avx"));
  add("AVX2", __builtin_cpu_supports("avx2"));
  add("FMA", __builtin_cpu_supports("fma"));
  add("F16C", __builtin_cpu_supports("f16c"));
  add("AVX-512F", __builtin_cpu_supports("avx512f"));
  add("AVX-512BW", __builtin_cpu_supports("avx512bw"));
  add("AVX-512VL", __builtin_cpu_supports("avx512vl"));
  add("AVX-512-BF16", __builtin_cpu_supports("avx512bf16"));
#else
  s = "(feature detection is implemented for x86-64 only)";
#endif
  return s;
}

}  // namespace

int run_info(int argc, char** argv) {
  Args args("mpx info", "mpx info");
  if (!args.parse(argc, argv)) return 0;
  std::printf("mpx %s\n", MPX_VERSION_STRING);
  std::printf("build: %s, %s, CPU flags: %s\n", MPX_BUILD_TYPE[0] ? MPX_BUILD_TYPE : "(no build type)",
              MPX_BUILD_COMPILER, MPX_BUILD_ARCH_FLAGS[0] ? MPX_BUILD_ARCH_FLAGS : "(compiler default)");
#ifdef MPX_WITH_CUDA
  const bool cuda_built = true;
#else
  const bool cuda_built = false;
#endif
  std::printf("backends: CUDA %s, cuDNN %s, oneDNN %s; CPU f32 convolutions: %s; bf16: %s\n", cuda_built ? "on" : "off",
              std::string(MPX_BUILD_CUDNN) == "ON" ? "on" : "off", std::string(MPX_BUILD_ONEDNN) == "ON" ? "on" : "off",
              cpu_conv_backend().c_str(), cpu_conv_native(kBFloat16) ? "native" : "on f32 copies");
  std::printf("CPU matrix products: %s\n", cpu_matmul_backend().c_str());
  std::printf("CPU attention: %s\n", cpu_attention_backend().c_str());
  std::printf("distributed: %s\n", distributed::backend_info().c_str());
  std::printf("JPEG decoding: %s%s\n",
              data::have_libjpeg_turbo() ? "libjpeg-turbo"
                                         : "stb_image (install libturbojpeg0-dev and rebuild for libjpeg-turbo)",
              data::have_jpeg_region_decode()
                  ? ", reduced-size region decode for imagefolder"
                  : "; no reduced-size region decode (install libjpeg62-turbo-dev and rebuild)");
  const std::string cuda_problem = cuda_built ? cuda::detail::module_problem() : "";
  std::printf("GPU JPEG decoding: %s\n",
              data::have_nvjpeg()    ? "nvJPEG (mpx train --gpu-decode)"
              : !cuda_problem.empty() ? ("off (" + cuda_problem + ")").c_str()
                                     : "off (no nvJPEG at build time: tools/install-deps.sh fetches it for CUDA builds, "
                                       "then reconfigure with -DMPX_NVJPEG=ON)");
  std::printf("ops in the registry: %d\n", kNumOps);
  std::printf("CPU: %u hardware threads, OpenMP threads %d\n", std::thread::hardware_concurrency(), mpx::get_num_threads());
  std::printf("CPU features: %s\n", cpu_features().c_str());
  if (!cuda_built) {
    std::printf("CUDA: not built (reconfigure with -DMPX_CUDA=ON where nvcc is installed)\n");
    return 0;
  }
  std::printf("CUDA: %s\n", cuda::version_string().c_str());
  if (!cuda_problem.empty()) return 0;  // the line above said why
  std::printf("cuDNN: %s\n", cuda::cudnn_version().c_str());
  const bool cudnn_sdp = cuda::cudnn_version().find("frontend") != std::string::npos;
  std::printf("CUDA attention (f16/bf16): %s%s, then mpx's row kernels\n",
              !cudnn_sdp                    ? "no cuDNN fused attention (built without cuDNN's frontend: tools/install-deps.sh "
                                              "fetches it), "
              : cuda::cudnn_sdp_enabled() ? "cuDNN's fused attention (no mask or dropout), "
                                          : "cuDNN's fused attention off (MPX_SDPA_CUDNN=0), ",
              cuda::flash_sdp_enabled() ? "mpx's flash kernels" : "flash kernels off (MPX_SDPA_FLASH=0)");
  const int n = cuda_device_count();
  std::printf("CUDA devices: %d\n", n);
  for (int i = 0; i < n; ++i) {
    const cuda::DeviceProperties p = cuda::device_properties(i);
    std::printf("  cuda:%d  %s, compute capability %d.%d, %d SMs, %.1f GiB, L2 %.0f MiB\n", i, p.name.c_str(), p.major,
                p.minor, p.multiprocessors, static_cast<double>(p.total_memory) / (1024.0 * 1024 * 1024),
                static_cast<double>(p.l2_cache) / (1024.0 * 1024));
  }
  return 0;
}

}  // namespace mpx::cli
