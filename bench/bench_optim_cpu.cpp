// CPU time of one optimizer step over a GPT-sized parameter list (14.2 M parameters in 74 tensors), per optimizer;
// peer: bench/peer_optim_cpu.py (torch.optim's foreach and fused steps) on the same values.
#include <mpx/mpx.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <functional>
#include <memory>
#include <string>
#include <vector>

using namespace mpx;

namespace {

// The shapes of a 6-layer width-384 GPT with an 8192-token embedding: the peer builds the same list.
std::vector<IntList> shapes() {
  std::vector<IntList> s{{8192, 384}, {1024, 384}};
  for (int l = 0; l < 6; ++l) {
    for (IntList x : {IntList{384}, IntList{384}, IntList{1152, 384}, IntList{1152}, IntList{384, 384}, IntList{384},
                      IntList{384}, IntList{384}, IntList{1536, 384}, IntList{1536}, IntList{384, 1536}, IntList{384}})
      s.push_back(x);
  }
  return s;
}

// Values from closed formulas over the flat position across the list (the peer uses the same ones).
Tensor formula(const IntList& shape, int64_t offset, double freq, double scale) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  Tensor t = arange(0, static_cast<double>(n), 1.0, TensorOptions(kFloat64)) + static_cast<double>(offset);
  return (sin(t * freq) * scale).reshape(shape).to(kFloat32);
}

using Make = std::function<std::unique_ptr<optim::Optimizer>(std::vector<Tensor>)>;

}  // namespace

int main(int argc, char** argv) {
  int64_t reps = 10;
  std::string dtype = "f32", only;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    if (a == "--reps") reps = std::stoll(argv[i + 1]);
    else if (a == "--dtype") dtype = argv[i + 1];
    else if (a == "--only") only = "," + std::string(argv[i + 1]) + ",";
    else {
      std::fprintf(stderr, "usage: %s [--reps R] [--dtype f32|bf16] [--only sgd,adam,...]   (bf16: bf16 parameters with f32 masters)\n", argv[0]);
      return 2;
    }
  }
  if (dtype != "f32" && dtype != "bf16") {
    std::fprintf(stderr, "--dtype must be f32 or bf16, got %s\n", dtype.c_str());
    return 2;
  }
  const std::vector<std::pair<std::string, Make>> opts = {
      {"sgd", [](std::vector<Tensor> p) { return std::make_unique<optim::SGD>(p, optim::SGDOptions(1e-2).momentum(0.9).weight_decay(1e-4)); }},
      {"adam", [](std::vector<Tensor> p) { return std::make_unique<optim::Adam>(p, optim::AdamOptions(1e-3)); }},
      {"adamw", [](std::vector<Tensor> p) { return std::make_unique<optim::AdamW>(p, optim::AdamWOptions(1e-3)); }},
      {"rmsprop", [](std::vector<Tensor> p) { return std::make_unique<optim::RMSprop>(p, optim::RMSpropOptions(1e-3)); }},
      {"adagrad", [](std::vector<Tensor> p) { return std::make_unique<optim::Adagrad>(p, optim::AdagradOptions(1e-2)); }},
      {"lamb", [](std::vector<Tensor> p) { return std::make_unique<optim::LAMB>(p, optim::LAMBOptions(1e-3)); }},
  };
  const DType dt = dtype == "bf16" ? kBFloat16 : kFloat32;
  for (const auto& [name, make] : opts) {
    if (!only.empty() && only.find("," + name + ",") == std::string::npos) continue;
    std::vector<Tensor> ps;
    int64_t off = 0, total = 0;
    for (const IntList& s : shapes()) {
      Tensor p = formula(s, off, 1e-3, 1.0).to(dt).set_requires_grad(true);
      p.set_grad(formula(s, off, 3e-3, 1e-2).to(dt));
      off += p.numel();
      total += p.numel();
      ps.push_back(p);
    }
    auto opt = make(ps);
    std::vector<double> ms;
    for (int64_t r = 0; r < reps + 2; ++r) {
      const auto t0 = std::chrono::steady_clock::now();
      opt->step();
      if (r >= 2) ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
    }
    std::sort(ms.begin(), ms.end());
    double check = 0;
    for (const Tensor& p : ps) check += sum(p.to(kFloat64)).item<double>();
    std::printf("mpx   %-8s %s params (%s): %.2f ms per step (median of %lld), %lld parameters, sum after %lld steps %.6f\n",
                name.c_str(), dtype.c_str(), dt == kFloat32 ? "no masters" : "f32 masters", ms[ms.size() / 2],
                static_cast<long long>(reps), static_cast<long long>(total), static_cast<long long>(reps + 2), check);
  }
  return 0;
}
