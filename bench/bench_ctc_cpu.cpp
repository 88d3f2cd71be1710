// CPU time of a CTC loss step (log_softmax, ctc_loss, backward) at a speech-like shape; peer: bench/peer_ctc_cpu.py
// on the same logits (a closed formula on both sides) and targets.
#include <mpx/mpx.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

using namespace mpx;

int main(int argc, char** argv) {
  int64_t T = 200, N = 16, C = 32, S = 40, reps = 10;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    const int64_t v = std::stoll(argv[i + 1]);
    if (a == "--T") T = v;
    else if (a == "--N") N = v;
    else if (a == "--C") C = v;
    else if (a == "--S") S = v;
    else if (a == "--reps") reps = v;
    else {
      std::fprintf(stderr, "usage: %s [--T frames] [--N batch] [--C classes] [--S labels] [--reps R]\n", argv[0]);
      return 2;
    }
  }
  // The same numbers as the peer: logits sin(0.01 (t + 3n + 7c)), labels 1 + (n + 5k) % (C - 1), lengths shrinking.
  std::vector<float> v(static_cast<size_t>(T * N * C));
  for (int64_t t = 0; t < T; ++t)
    for (int64_t n = 0; n < N; ++n)
      for (int64_t c = 0; c < C; ++c)
        v[static_cast<size_t>((t * N + n) * C + c)] = static_cast<float>(std::sin(0.01 * static_cast<double>(t + 3 * n + 7 * c)) * 3.0);
  std::vector<int64_t> targets(static_cast<size_t>(N * S)), il(static_cast<size_t>(N)), tl(static_cast<size_t>(N));
  for (int64_t n = 0; n < N; ++n) {
    for (int64_t k = 0; k < S; ++k) targets[static_cast<size_t>(n * S + k)] = 1 + (n + 5 * k) % (C - 1);
    il[static_cast<size_t>(n)] = T - n;
    tl[static_cast<size_t>(n)] = S - n % 5;
  }
  const Tensor logits = tensor(v, {T, N, C}).set_requires_grad(true), tg = tensor(targets, {N, S});
  std::vector<double> ms;
  double loss = 0;
  for (int64_t r = 0; r < reps + 2; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    logits.mutable_grad() = Tensor();
    const Tensor l = ctc_loss(log_softmax(logits, 2), tg, il, tl);
    l.backward();
    loss = l.item<double>();
    if (r >= 2) ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  std::sort(ms.begin(), ms.end());
  std::printf("mpx   ctc T=%lld N=%lld C=%lld S=%lld: %.2f ms per forward+backward (median of %lld)  loss %.6f\n",
              static_cast<long long>(T), static_cast<long long>(N), static_cast<long long>(C), static_cast<long long>(S),
              ms[ms.size() / 2], static_cast<long long>(reps), loss);
  return 0;
}
