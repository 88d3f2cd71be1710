# PyTorch peer of bench/bench_gemm_cuda.cpp: torch.matmul TFLOP/s for n^3 GEMMs in f16, bf16 and f32+TF32.
#
#   python3 bench/peer_gemm_cuda.py [--sizes 4096,8192] [--warmup 5] [--runs 20]
#
# Same protocol as the mpx program: warm-up, then the median of individually event-timed runs
# rotating among three input sets; prints a table and `torch_gemm,<dtype>,<n>,<tflops>` lines.

import argparse
import statistics
import sys

import torch


def median_ms(dtype, tf32, n, warmup, runs):
    torch.backends.cuda.matmul.allow_tf32 = tf32
    a = torch.randn(n, n).to(dtype)
    b = torch.randn(n, n).to(dtype)
    as_ = [a.cuda() for _ in range(3)]  # three distinct device buffers
    bs = [b.cuda() for _ in range(3)]
    for i in range(warmup):
        torch.matmul(as_[i % 3], bs[i % 3])
    torch.cuda.synchronize()
    start = torch.cuda.Event(enable_timing=True)
    end = torch.cuda.Event(enable_timing=True)
    ms = []
    for i in range(runs):
        start.record()
        torch.matmul(as_[i % 3], bs[i % 3])
        end.record()
        end.synchronize()
        ms.append(start.elapsed_time(end))
    return statistics.median(ms)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default="4096,8192")
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--runs", type=int, default=20)
    args = ap.parse_args()
    if not torch.cuda.is_available():
        print("peer_gemm_cuda: no CUDA device is visible to torch; nothing to measure", file=sys.stderr)
        return 1
    sizes = [int(s) for s in args.sizes.split(",")]
    torch.manual_seed(0)
    print(f"device: {torch.cuda.get_device_name()}, torch {torch.__version__}, CUDA {torch.version.cuda}")
    print(f"torch.matmul, n x n x n, median of {args.runs} runs after {args.warmup} warm-up runs, 3 rotating input sets\n")
    cases = [("f16", torch.float16, False), ("bf16", torch.bfloat16, False), ("tf32", torch.float32, True)]
    csv = []
    print(f"{'dtype':<6} {'n':>6} {'ms':>10} {'TFLOP/s':>9}")
    for label, dtype, tf32 in cases:
        for n in sizes:
            ms = median_ms(dtype, tf32, n, args.warmup, args.runs)
            tflops = 2.0 * n ** 3 / (ms * 1e-3) / 1e12
            print(f"{label:<6} {n:>6} {ms:>10.3f} {tflops:>9.1f}")
            csv.append(f"torch_gemm,{label},{n},{tflops:.6f}")
    torch.backends.cuda.matmul.allow_tf32 = False
    print()
    print("\n".join(csv))
    return 0


if __name__ == "__main__":
    sys.exit(main())
