#!/usr/bin/env python3
"""PyTorch peer of bench/bench_ctc_cpu: the same logits, targets and lengths, log_softmax + ctc_loss + backward."""
import argparse, math, time

import torch

ap = argparse.ArgumentParser()
for k, d in (("T", 200), ("N", 16), ("C", 32), ("S", 40), ("reps", 10)):
    ap.add_argument("--" + k, type=int, default=d)
a = ap.parse_args()
T, N, C, S = a.T, a.N, a.C, a.S
t = torch.arange(T).view(T, 1, 1).double()
n = torch.arange(N).view(1, N, 1).double()
c = torch.arange(C).view(1, 1, C).double()
logits = (torch.sin(0.01 * (t + 3 * n + 7 * c)) * 3.0).float().requires_grad_()
targets = torch.tensor([[1 + (i + 5 * k) % (C - 1) for k in range(S)] for i in range(N)])
il = torch.tensor([T - i for i in range(N)])
tl = torch.tensor([S - i % 5 for i in range(N)])
ms = []
for r in range(a.reps + 2):
    t0 = time.perf_counter()
    logits.grad = None
    loss = torch.nn.functional.ctc_loss(torch.log_softmax(logits, 2), targets, il, tl)
    loss.backward()
    if r >= 2:
        ms.append((time.perf_counter() - t0) * 1e3)
ms.sort()
print(f"torch ctc T={T} N={N} C={C} S={S}: {ms[len(ms) // 2]:.2f} ms per forward+backward (median of {a.reps})  "
      f"loss {loss.item():.6f}")
