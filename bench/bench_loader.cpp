// Input-pipeline throughput: ImageFolder + DataLoader on the ImageNet train or eval transform,
// with no model, at a given worker count (the peer is bench/peer_loader.py; bench/run_loader.sh
// runs both). --generate writes the JPEG folder it reads. --path compose is the code a user
// porting a torchvision script writes (a Compose given to ImageFolder), unchanged.
#include <mpx/mpx.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include <time.h>

#define STB_IMAGE_WRITE_IMPLEMENTATION
#include <stb/stb_image_write.h>

using namespace mpx;
namespace fs = std::filesystem;
namespace T = mpx::data::transforms;

namespace {
// Photograph-like content at photographic sizes: multi-octave smooth noise per channel (so the
// JPEG has real AC energy at every frequency), hard-edged shapes, and sensor-like grain.
void generate(const std::string& dir, int n, int classes, uint32_t seed) {
  std::mt19937 g(seed);
  std::uniform_real_distribution<double> u(0, 1);
  for (int i = 0; i < n; ++i) {
    const int w = 500 + static_cast<int>(u(g) * 525), h = std::clamp(static_cast<int>(w * (0.66 + 0.2 * u(g))), 375, 768);
    const bool portrait = u(g) < 0.25;
    const int W = portrait ? h : w, H = portrait ? w : h;
    // Value noise: random lattices at periods 128, 32, 8 px, bilinearly interpolated.
    std::vector<unsigned char> px(static_cast<size_t>(W) * H * 3);
    struct Octave { int period; double amp; int gw, gh; std::vector<double> v; };
    std::vector<Octave> oct;
    for (auto [period, amp] : {std::pair{128, 70.0}, {32, 30.0}, {8, 12.0}}) {
      Octave o{period, amp, W / period + 2, H / period + 2, {}};
      o.v.resize(static_cast<size_t>(o.gw * o.gh * 3));
      for (double& x : o.v) x = u(g) - 0.5;
      oct.push_back(std::move(o));
    }
    const int shapes = 3 + static_cast<int>(u(g) * 4);
    std::vector<std::array<double, 6>> sh(static_cast<size_t>(shapes));
    for (auto& s : sh) s = {u(g) * W, u(g) * H, 20 + u(g) * W / 4, u(g) * 255, u(g) * 255, u(g) * 255};
    for (int y = 0; y < H; ++y)
      for (int x = 0; x < W; ++x)
        for (int c = 0; c < 3; ++c) {
          double v = 128;
          for (const auto& o : oct) {
            const double fx = static_cast<double>(x) / o.period, fy = static_cast<double>(y) / o.period;
            const int ix = static_cast<int>(fx), iy = static_cast<int>(fy);
            const double ax = fx - ix, ay = fy - iy;
            auto at = [&](int xx, int yy) { return o.v[static_cast<size_t>((yy * o.gw + xx) * 3 + c)]; };
            v += o.amp * ((1 - ay) * ((1 - ax) * at(ix, iy) + ax * at(ix + 1, iy)) +
                          ay * ((1 - ax) * at(ix, iy + 1) + ax * at(ix + 1, iy + 1)));
          }
          for (const auto& s : sh)
            if (std::abs(x - s[0]) + std::abs(y - s[1]) < s[2]) v = 0.5 * v + 0.5 * s[3 + c];
          v += 10 * (u(g) - 0.5);
          px[(static_cast<size_t>(y) * W + x) * 3 + c] = static_cast<unsigned char>(std::clamp(v, 0.0, 255.0));
        }
    const fs::path p = fs::path(dir) / ("class" + std::to_string(i % classes)) / ("img" + std::to_string(i) + ".jpg");
    fs::create_directories(p.parent_path());
    if (!stbi_write_jpg(p.string().c_str(), W, H, 3, px.data(), 90)) {
      std::fprintf(stderr, "bench_loader: cannot write %s\n", p.string().c_str());
      std::exit(1);
    }
  }
}
}  // namespace

int main(int argc, char** argv) {
  std::string dir, transform = "train", path = "fused";
  int workers = 1, generate_n = 0, batch = 32, epochs = 1;
  bool json = false;
  for (int i = 1; i < argc; ++i) {
    auto next = [&](const char* flag) -> std::string {
      if (i + 1 >= argc) { std::fprintf(stderr, "%s needs a value\n", flag); std::exit(2); }
      return argv[++i];
    };
    if (!std::strcmp(argv[i], "--data")) dir = next("--data");
    else if (!std::strcmp(argv[i], "--generate")) generate_n = std::stoi(next("--generate"));
    else if (!std::strcmp(argv[i], "--workers")) workers = std::stoi(next("--workers"));
    else if (!std::strcmp(argv[i], "--batch")) batch = std::stoi(next("--batch"));
    else if (!std::strcmp(argv[i], "--epochs")) epochs = std::stoi(next("--epochs"));
    else if (!std::strcmp(argv[i], "--transform")) transform = next("--transform");
    else if (!std::strcmp(argv[i], "--path")) path = next("--path");
    else if (!std::strcmp(argv[i], "--json")) json = true;
    else {
      std::fprintf(stderr,
                   "usage: %s --data DIR [--generate N] [--workers N] [--batch N] [--epochs N]\n"
                   "          [--transform train|eval] [--path compose|fused|fused-full|composed|gpu] [--json]\n"
                   "  compose: transforms::Compose given to ImageFolder, as torchvision scripts do (runs fused)\n"
                   "  fused: ImagePipeline (reduced-size region decode + one resample pass)\n"
                   "  fused-full: the same at full decode size\n"
                   "  composed: read_image + the transforms one by one (Compose with fuse=false)\n"
                   "  gpu: the pipeline's crops decoded by nvJPEG on CUDA device 0 (--gpu-decode)\n",
                   argv[0]);
      return 2;
    }
  }
  if (dir.empty()) { std::fprintf(stderr, "bench_loader: --data DIR is required\n"); return 2; }
  if (generate_n > 0) {
    generate(dir, generate_n, 4, 1234);
    std::printf("bench_loader: wrote %d JPEGs under %s\n", generate_n, dir.c_str());
    return 0;
  }
  if (transform != "train" && transform != "eval") { std::fprintf(stderr, "--transform is train or eval\n"); return 2; }
  const bool train = transform == "train";
  std::shared_ptr<data::ImageFolder> ds;
  if (path == "compose" || path == "composed") {
    // torchvision's recipes as a user writes them; "composed" turns the fusion off.
    const bool fuse = path == "compose";
    T::Compose tf = train ? T::Compose({T::RandomResizedCrop(224, {0.08, 1.0}), T::RandomHorizontalFlip(), T::ToTensor(),
                                        T::Normalize({0.485, 0.456, 0.406}, {0.229, 0.224, 0.225})},
                                       fuse)
                          : T::Compose({T::Resize(256), T::CenterCrop(224), T::ToTensor(),
                                        T::Normalize({0.485, 0.456, 0.406}, {0.229, 0.224, 0.225})},
                                       fuse);
    ds = std::make_shared<data::ImageFolder>(dir, tf);
  } else if (path == "fused" || path == "fused-full" || path == "gpu") {
    auto p = train ? data::ImagePipeline::train(224) : data::ImagePipeline::eval(256, 224);
    p.reduced_decode(path == "fused");
    auto o = data::ImageFolderOptions().pipeline(p);
    if (path == "gpu") {
      if (const std::string why = data::gpu_decode_problem(Device::cuda()); !why.empty()) {
        std::fprintf(stderr, "bench_loader: --path gpu: %s\n", why.c_str());
        return 1;
      }
      o.gpu_decode(Device::cuda());
    }
    ds = std::make_shared<data::ImageFolder>(dir, o);
  } else {
    std::fprintf(stderr, "--path is compose, fused, fused-full, composed or gpu\n");
    return 2;
  }
  data::DataLoader loader(ds, data::DataLoaderOptions(batch).workers(workers).shuffle().seed(0));
  // One untimed pass over a few batches: page cache, allocator and thread start-up.
  {
    int k = 0;
    for (auto& b : loader) {
      (void)b;
      if (++k == 3) break;
    }
  }
  // CPU time of the whole process (workers and consumer): on a shared machine, images per
  // CPU-second is the per-core figure that other load disturbs least.
  auto cpu_now = [] {
    timespec ts{};
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
  };
  int64_t images = 0;
  double seconds = 0, wait = 0, cpu = 0;
  for (int e = 0; e < epochs; ++e) {
    const auto t0 = std::chrono::steady_clock::now();
    const double c0 = cpu_now();
    for (auto& b : loader) images += b.data.size(0);
    if (path == "gpu") cuda::synchronize();  // the last batch's decode may still be running
    cpu += cpu_now() - c0;
    seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    wait += loader.stats().wait_s;
  }
  const double ips = static_cast<double>(images) / seconds;
  const int cores = std::max(1, workers);
  // Which way the data set ran its transform: the first word of LoaderStats::transform_path.
  const std::string how = loader.stats().transform_path;
  const std::string runs = how.substr(0, how.find(':'));
  if (json) {
    std::printf("{\"impl\": \"mpx\", \"path\": \"%s\", \"runs\": \"%s\", \"transform\": \"%s\", \"workers\": %d, "
                "\"batch\": %d, \"images\": %lld, \"seconds\": %.4f, \"images_per_s\": %.2f, "
                "\"images_per_s_per_core\": %.2f, \"cpu_s\": %.4f, \"images_per_cpu_s\": %.2f, \"wait_s\": %.4f}\n",
                path.c_str(), runs.c_str(), transform.c_str(), workers, batch, static_cast<long long>(images), seconds,
                ips, ips / cores, cpu, static_cast<double>(images) / cpu, wait);
  } else {
    std::printf("mpx %s %s workers=%d: %lld images in %.2f s: %.1f images/s, %.1f per core, %.1f per CPU-second "
                "(stall %.2f s)\n  %s\n",
                path.c_str(), transform.c_str(), workers, static_cast<long long>(images), seconds, ips, ips / cores,
                static_cast<double>(images) / cpu, wait, how.c_str());
  }
  return 0;
}
