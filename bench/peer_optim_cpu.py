# PyTorch peer of bench/bench_optim_cpu.cpp: one step of torch.optim over the same 14.2 M f32 parameters, foreach and
# (where torch has it on the CPU) fused implementations, and torch's default for CPU tensors. Usage: peer_optim_cpu.py [--reps R] [--threads N]
import argparse
import math
import statistics
import time

import torch


def shapes():
    s = [(8192, 384), (1024, 384)]
    for _ in range(6):
        s += [(384,), (384,), (1152, 384), (1152,), (384, 384), (384,), (384,), (384,), (1536, 384), (1536,),
              (384, 1536), (384,)]
    return s


def formula(shape, offset, freq, scale):
    n = math.prod(shape)
    t = torch.arange(n, dtype=torch.float64) + offset
    return (torch.sin(t * freq) * scale).reshape(shape).float()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--threads", type=int, default=0)
    a = ap.parse_args()
    if a.threads:
        torch.set_num_threads(a.threads)
    opts = [
        ("sgd", torch.optim.SGD, dict(lr=1e-2, momentum=0.9, weight_decay=1e-4)),
        ("adam", torch.optim.Adam, dict(lr=1e-3)),
        ("adamw", torch.optim.AdamW, dict(lr=1e-3)),
        ("rmsprop", torch.optim.RMSprop, dict(lr=1e-3)),
        ("adagrad", torch.optim.Adagrad, dict(lr=1e-2)),
    ]
    for name, cls, kw in opts:
        # default: what torch.optim picks for CPU tensors (its single-tensor loop).
        for impl in ("default", "foreach", "fused"):
            ps, off = [], 0
            for s in shapes():
                p = formula(s, off, 1e-3, 1.0).requires_grad_(True)
                p.grad = formula(s, off, 3e-3, 1e-2)
                off += p.numel()
                ps.append(p)
            try:
                opt = cls(ps, **kw, **({} if impl == "default" else {impl: True}))
                opt.step()
            except (RuntimeError, TypeError) as e:
                print(f"torch {name:8s} {impl:7s}: not available ({str(e).splitlines()[0][:80]})")
                continue
            ms = []
            for r in range(a.reps + 1):
                t0 = time.perf_counter()
                opt.step()
                if r >= 1:
                    ms.append((time.perf_counter() - t0) * 1e3)
            check = sum(float(p.detach().double().sum()) for p in ps)
            print(f"torch {name:8s} {impl:7s} f32 params: {statistics.median(ms):.2f} ms per step (median of {a.reps}), "
                  f"{off} parameters, sum after {a.reps + 2} steps {check:.6f}  (torch {torch.__version__}, "
                  f"{torch.get_num_threads()} threads)")


if __name__ == "__main__":
    main()
