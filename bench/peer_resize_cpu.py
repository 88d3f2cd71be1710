#!/usr/bin/env python3
"""PyTorch peer of bench/bench_resize_cpu: F.interpolate nearest and bilinear, or with --pad F.pad's four modes, or
with --instance-norm an InstanceNorm2d (affine, running statistics, in the data's dtype); forward and forward +
backward."""
import argparse, time

import torch
import torch.nn.functional as F

ap = argparse.ArgumentParser()
ap.add_argument("--shape", default="16,64,64,64")
ap.add_argument("--scale", type=float, default=2.0)
ap.add_argument("--dtype", choices=["f32", "bf16"], default="f32")
ap.add_argument("--pad", type=int, default=0)
ap.add_argument("--instance-norm", action="store_true")
ap.add_argument("--reps", type=int, default=11)
a = ap.parse_args()
shape = [int(s) for s in a.shape.split(",")]
torch.manual_seed(0)
x0 = torch.randn(*shape).to(torch.bfloat16 if a.dtype == "bf16" else torch.float32)
norm = torch.nn.InstanceNorm2d(shape[1], affine=True, track_running_stats=True).to(x0.dtype)
modes = ("affine",) if a.instance_norm else ("reflect", "replicate", "circular", "constant") if a.pad else \
    ("nearest", "bilinear")
for mode in modes:
    for backward in (False, True):
        ms = []
        for r in range(a.reps):
            x = x0.detach().requires_grad_(backward)
            t0 = time.perf_counter()
            if a.instance_norm:
                y = norm(x)
            elif a.pad:
                y = F.pad(x, [a.pad] * 4, mode=mode)
            else:
                y = F.interpolate(x, scale_factor=a.scale, mode=mode)
            if backward:
                y.backward(torch.ones_like(y))
            ms.append((time.perf_counter() - t0) * 1e3)
            if r == 0:
                s = (x.grad if backward else y).double().sum().item()
        ms.sort()
        what = f"instance_norm {mode} {a.dtype} [{a.shape}]" if a.instance_norm else \
            f"pad {mode} {a.dtype} [{a.shape}] pad {a.pad}" if a.pad else \
            f"interpolate {mode} {a.dtype} [{a.shape}] x{a.scale:g}"
        print(f"torch {torch.__version__} {what} "
              f"{'forward+backward' if backward else 'forward'}: {ms[len(ms) // 2]:.2f} ms (median of {a.reps}, "
              f"min {ms[0]:.2f}), sum {s:.6g}")
