#!/usr/bin/env python3
"""PyTorch peer of bench/bench_cross_entropy_cpu: cross_entropy forward + backward on [N, C] logits, bf16 under
autocast (the f32 cast autocast makes on CUDA, written out: CPU autocast leaves the loss in bf16) or f32."""
import argparse, time

import torch
import torch.nn.functional as F

ap = argparse.ArgumentParser()
ap.add_argument("--rows", type=int, default=1024)
ap.add_argument("--classes", type=int, default=50257)
ap.add_argument("--dtype", choices=["f32", "bf16"], default="bf16")
ap.add_argument("--reps", type=int, default=7)
a = ap.parse_args()
torch.manual_seed(0)
dt = torch.bfloat16 if a.dtype == "bf16" else torch.float32
x0 = (torch.randn(a.rows, a.classes) * 2.0).to(dt)
t = torch.randint(0, a.classes, (a.rows,))
ms = []
for _ in range(a.reps):
    x = x0.clone().requires_grad_(True)
    t0 = time.perf_counter()
    loss = F.cross_entropy(x.float(), t)
    loss.backward()
    v = loss.item()
    ms.append((time.perf_counter() - t0) * 1e3)
ms.sort()
print(f"torch {torch.__version__} cross_entropy {a.dtype} [{a.rows} x {a.classes}]: forward+backward "
      f"{ms[len(ms) // 2]:.1f} ms (median of {a.reps}, min {ms[0]:.1f}), loss {v:.6f}")
