// Pieces of `mpx train` kept apart from its loop: evaluation on the test split (summed over ranks) and --pretrained weights.
#include "tools/train_parts.h"

#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include "tools/ranks.h"
#include "tools/run_dir.h"

namespace mpx::cli {

namespace fs = std::filesystem;
namespace F = nn::functional;

EvalResult evaluate(const nn::AnyModule& net, data::DevicePrefetcher& batches) {
  const auto t0 = std::chrono::steady_clock::now();
  net.ptr()->eval();
  NoGradGuard ng;
  EvalResult r;
  // Sums stay on the device until the end: no batch waits for the previous one.
  Tensor loss_sum, h1, h5, nf;
  for (auto& batch : batches) {
    if (interrupted()) {  // a job scheduler's grace period is shorter than a long evaluation
      r.stopped = true;
      break;
    }
    const Tensor& y = batch.target;
    Tensor logits = net(batch.data).to(kFloat32);
    const int64_t b = y.size(0);
    Tensor l = F::cross_entropy(logits, y).to(kFloat64) * static_cast<double>(b);
    const TopkHits h = topk_hits(logits, y);
    loss_sum = loss_sum.defined() ? loss_sum + l : l;
    h1 = h1.defined() ? h1 + h.top1 : h.top1;
    h5 = h5.defined() ? h5 + h.top5 : h.top5;
    nf = nf.defined() ? nf + h.nonfinite : h.nonfinite;
    r.n += b;
  }
  net.ptr()->train();
  // Each rank evaluated its own images: the counts of all of them make the test split's numbers.
  auto value = [](const Tensor& t) { return t.defined() ? t.item<double>() : 0.0; };
  const std::vector<double> s = sum_over_ranks({value(loss_sum), value(h1), value(h5), value(nf),
                                                static_cast<double>(r.n), r.stopped ? 1.0 : 0.0});
  r.n = static_cast<int64_t>(s[4]);
  r.stopped = s[5] > 0;
  if (r.n > 0) {
    const double n = static_cast<double>(r.n);
    r.loss = s[0] / n;
    r.top1 = 100.0 * s[1] / n;
    r.top5 = 100.0 * s[2] / n;
    r.nonfinite = static_cast<int64_t>(s[3]);
  }
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return r;
}

void warn_nonfinite(const EvalResult& r) {
  if (r.nonfinite > 0)
    std::fprintf(stderr, "mpx train: warning: %lld of %lld test images got NaN or infinite logits: the weights have "
                 "diverged; they count as top-k hits only where torch.topk would rank them so\n",
                 static_cast<long long>(r.nonfinite), static_cast<long long>(r.n));
}

// --pretrained: every tensor whose name and shape fit is copied; the rest (typically the
// classifier head of another class count) keep their initialization, as a fine-tuning start.
void load_pretrained(nn::Module& m, const std::string& path, const std::string& arch) {
  TensorDict t;
  std::error_code ec;
  if (!fs::exists(path, ec)) MPX_ERROR("--pretrained ", path, ": no such file");
  if (std::FILE* f = std::fopen(path.c_str(), "rb")) std::fclose(f);
  else MPX_ERROR("--pretrained ", io_problem(path, std::error_code(errno, std::generic_category())));
  try {
    t = load_tensors(path);
  } catch (const std::exception& e) {
    MPX_ERROR("--pretrained ", path, " is unreadable (", e.what(), "); give a .safetensors file of weights");
  }
  // Our own checkpoints nest the model under "model."; DataParallel exports under "module.".
  std::map<std::string, Tensor> sd;
  for (const auto& [k, v] : t) {
    std::string name = k;
    for (const char* p : {"model.", "module."})
      if (name.rfind(p, 0) == 0) name = name.substr(std::strlen(p));
    if (k.rfind("optimizer.", 0) != 0) sd[name] = v;
  }
  const StateFit fit = fit_state(m, sd);
  MPX_CHECK(!fit.matched.empty(), "--pretrained ", path, " has no tensor that fits -a ", arch, ": ", fit.summary(),
            "; give weights of this architecture");
  std::map<std::string, Tensor> use;
  for (const auto& k : fit.matched) use[k] = sd.at(k);
  m.load_state_dict(use, false);
  std::printf("pretrained %s: %s; the others keep their initialization\n", path.c_str(), fit.summary().c_str());
}

}  // namespace mpx::cli
