# PyTorch's fused attention on the same shapes as bench/bench_attention_cuda.cpp (its flash backend where it applies).
import torch
import torch.nn.functional as F


def median_ms(f, warmup=3, runs=15):
    for _ in range(warmup):
        f()
    torch.cuda.synchronize()
    ms = []
    for _ in range(runs):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        f()
        b.record()
        b.synchronize()
        ms.append(a.elapsed_time(b))
    return sorted(ms)[len(ms) // 2]


def main():
    dev = torch.device("cuda")
    for dt, name in ((torch.bfloat16, "bf16"), (torch.float16, "f16")):
        for B, H, T, D in ((8, 12, 1024, 64), (4, 12, 2048, 128), (2, 12, 4096, 64), (1, 12, 8192, 128)):
            torch.manual_seed(1)
            q, k, v = (torch.randn(B, H, T, D, device=dev, dtype=dt, requires_grad=True) for _ in range(3))
            g = torch.randn(B, H, T, D, device=dev, dtype=dt)
            with torch.no_grad():
                fwd = median_ms(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True))
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
            before = torch.cuda.memory_allocated()
            both = median_ms(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True).backward(g))
            peak = (torch.cuda.max_memory_allocated() - before) / 2**20
            flops = 2.0 * B * H * T * T * D
            shape = f"{B} x {H} x {T} x {D}"
            print(f"{'pytorch':15s} {name:5s} {shape:22s} {fwd:10.3f} {both:10.3f} {flops / fwd / 1e9:12.1f} "
                  f"{3.5 * flops / both / 1e9:12.1f} {peak:10.1f}")
            print(f"csv,attention,pytorch,{name},{B},{H},{T},{D},{fwd:.4f},{both:.4f},{peak:.1f}")


if __name__ == "__main__":
    main()
