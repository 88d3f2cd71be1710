// cuDNN's own support check on mpx's attention graphs (ops/cuda/sdpa_cudnn_graph.cpp) for an H200 and an A100, without a GPU.
#include <catch2/catch.hpp>
#include <cudnn.h>
#include <dlfcn.h>

#include <string>
#include <vector>

#include "ops/cuda/sdpa_cudnn_graph.h"
#include "skip.h"

using namespace mpx;
using namespace mpx::cuda;

namespace {

// Devices as cuDNN's device-property JSON describes them (the fields cuDNN 9 reads).
struct Device {
  const char* name;
  int sm, sms;
  std::string json;
};
std::string describe(const char* name, int ver, int sms, int optin, long long mem, int sm_khz, int mem_khz, int l2) {
  return std::string("{\"deviceName\":\"") + name + "\",\"cudaDeviceId\":0,\"deviceVer\":" + std::to_string(ver) +
         ",\"driverVer\":13000,\"maxGridSize\":[2147483647,65535,65535],\"maxBlockSize\":[1024,1024,64],"
         "\"regsPerBlock\":65536,\"multiProcessorCount\":" + std::to_string(sms) +
         ",\"warpSize\":32,\"maxSharedMemoryPerBlock\":49152,\"maxSharedMemoryPerBlockOptin\":" +
         std::to_string(optin) +
         ",\"reservedSharedMemoryPerBlock\":1024,\"maxRegistersPerSM\":65536,\"maxCtasPerSM\":32,"
         "\"maxThreadsPerBlock\":1024,\"maxThreadsPerSM\":2048,\"pciDeviceId\":0,\"isTccDriver\":0,"
         "\"supportCoopLaunch\":1,\"totalGlobalMem\":" + std::to_string(mem) +
         ",\"smClockRateKHz\":" + std::to_string(sm_khz) + ",\"memClockRateKHz\":" + std::to_string(mem_khz) +
         ",\"l2CacheSize\":" + std::to_string(l2) + "}";
}
const std::vector<Device>& devices() {
  static const std::vector<Device> d = {
      {"H200", 90, 132, describe("NVIDIA H200", 900, 132, 232448, 150754820096LL, 1980000, 3201000, 62914560)},
      {"A100", 80, 108, describe("NVIDIA A100-SXM4-80GB", 800, 108, 166912, 85899345920LL, 1410000, 1593000, 41943040)},
  };
  return d;
}

SdpaGeom geom(int64_t B, int64_t H, int64_t Hk, int64_t L, int64_t S, int64_t E, bool causal, int64_t Ev = 0) {
  SdpaGeom g;
  g.B = B, g.H = H, g.Hk = Hk, g.L = L, g.S = S, g.E = E, g.Ev = Ev ? Ev : E;
  g.causal = causal;
  g.scale = 1.0 / 8;
  auto dense = [](int64_t* st, int64_t h, int64_t t, int64_t e) {
    st[0] = h * t * e, st[1] = t * e, st[2] = e, st[3] = 1;
  };
  dense(g.sq, H, L, E);
  dense(g.sk, Hk, S, E);
  dense(g.sv, Hk, S, g.Ev);
  return g;
}

// Whether this machine can run the check at all: cuDNN 9.11+ (device descriptions from JSON) and a libcuda
// to load (the engines cuDNN compiles at run time look for one; CTest puts the toolkit's stub first).
bool ready() {
  if (cudnnGetVersion() < 91100) {
    testing::skip_test("cuDNN " + std::to_string(cudnnGetVersion()) + " describes no device without one (9.11+)");
    return false;
  }
  if (!dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD) && !dlopen("libcuda.so.1", RTLD_NOW)) {
    testing::skip_test("no libcuda.so.1 to load (not even the CUDA toolkit's stub)");
    return false;
  }
  return true;
}

}  // namespace

TEST_CASE("cuDNN takes mpx's attention graphs on an H200 and an A100", "[cudnn][attention]") {
  if (!ready()) return;
  struct Shape {
    const char* name;
    SdpaGeom g;
  };
  std::vector<Shape> shapes = {
      {"no mask, L != S", geom(2, 3, 3, 37, 45, 64, false)},
      {"causal, head dim 128", geom(1, 2, 2, 150, 150, 128, true)},
      {"causal GQA", geom(1, 6, 2, 70, 70, 64, true)},
      {"GPT-2 124M", geom(8, 12, 12, 1024, 1024, 64, true)},
  };
  // GPT-2's heads read in place from its [B, T, 3C] projection (124M: 12 heads; XL: 25).
  for (int64_t H : {12, 25}) {
    SdpaGeom split = geom(8, H, H, 1024, 1024, 64, true);
    for (int64_t* st : {split.sq, split.sk, split.sv})
      st[0] = 1024 * 3 * H * 64, st[1] = 64, st[2] = 3 * H * 64, st[3] = 1;
    shapes.push_back({H == 12 ? "GPT-2 124M, split heads" : "GPT-2 XL, split heads", split});
  }
  // The other shapes of test_cuda_attention_paths.
  shapes.push_back({"causal L > S, value dim 16", geom(1, 2, 2, 90, 33, 32, true, 16)});
  shapes.push_back({"head dim 40", geom(2, 2, 2, 33, 65, 40, false)});
  for (const Device& d : devices())
    for (DType dt : {kFloat16, kBFloat16})
      for (const Shape& s : shapes)
        for (int pass = 0; pass < 3; ++pass) {  // forward, backward, deterministic backward
          const std::string why =
              cudnn_sdpa::check_deviceless(dt, s.g, pass > 0, pass == 2, d.json, d.sm, d.sms);
          INFO(d.name << " " << dtype_name(dt) << " " << s.name << " "
                      << (pass == 0 ? "forward" : pass == 1 ? "backward" : "deterministic backward") << ": " << why);
          CHECK(why.empty());
        }
}

TEST_CASE("cuDNN's support check refuses what it cannot run", "[cudnn][attention]") {
  if (!ready()) return;
  const Device& h200 = devices()[0];
  // Head dims past the backward's bound.
  CHECK(!cudnn_sdpa::check_deviceless(kFloat16, geom(1, 2, 2, 64, 64, 512, false), true, false, h200.json, h200.sm,
                                      h200.sms)
             .empty());
  // A device older than Ampere (a T4's compute capability 7.5).
  CHECK(!cudnn_sdpa::check_deviceless(kBFloat16, geom(1, 2, 2, 64, 64, 64, false), false, false, h200.json, 75, 40)
             .empty());
  // A device description cuDNN cannot read.
  CHECK(cudnn_sdpa::check_deviceless(kFloat16, geom(1, 2, 2, 64, 64, 64, false), false, false, "{}", h200.sm, h200.sms)
            .find("device description") == 0);
}
