#!/usr/bin/env python3
"""PyTorch peer of bench/bench_gpt_cpu: the same GPT, initial weights (DIR/init.safetensors), token
stream (DIR/tokens.bin) and batches; prints one JSON line like the mpx program."""
import argparse, json, os, resource, sys, time

import torch
import torch.nn.functional as F
from safetensors.torch import load_file

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from peer_bench_gpt import GPT  # noqa: E402  the one PyTorch twin of models::GPT

PRESETS = {"gpt-tiny": (4, 4, 128, 128), "gpt-mini": (6, 6, 384, 256)}  # layers, heads, width, context


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dir", default="out/bench_gpt")
    ap.add_argument("--model", default="gpt-tiny")
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--warmup", type=int, default=50)
    ap.add_argument("--dtype", choices=["f32", "bf16"], default="f32")
    ap.add_argument("--compile", action="store_true", help="torch.compile the model (inductor)")
    ap.add_argument("--profile", action="store_true", help="print PyTorch's per-op CPU time of the measured steps")
    a = ap.parse_args()
    L, H, C, T = PRESETS[a.model]
    V = 128
    torch.manual_seed(0)
    net = GPT(V, L, H, C, T)
    missing, unexpected = net.load_state_dict(load_file(os.path.join(a.dir, "init.safetensors")), strict=True)
    text = torch.frombuffer(bytearray(open(os.path.join(a.dir, "tokens.bin"), "rb").read()), dtype=torch.int64)
    opt = torch.optim.AdamW(net.parameters(), lr=1e-3)
    model = torch.compile(net) if a.compile else net
    span = text.numel() - T - 1
    times, losses = [], {}
    prof = None
    for s in range(a.steps):
        if a.profile and s == a.warmup:
            prof = torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU])
            prof.__enter__()
        starts = [((s * a.batch + i) * 9973) % span for i in range(a.batch)]
        x = torch.stack([text[st:st + T] for st in starts])
        y = torch.stack([text[st + 1:st + T + 1] for st in starts]).reshape(-1)
        t0 = time.perf_counter()
        opt.zero_grad()
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=a.dtype == "bf16"):
            logits = model(x)
            loss = F.cross_entropy(logits.view(-1, V), y)
        loss.backward()
        opt.step()
        l = loss.item()
        dt = time.perf_counter() - t0
        if s >= a.warmup:
            times.append(dt)
        if s == 0 or (s + 1) % 100 == 0:
            losses[str(s + 1)] = round(l, 4)
    if prof is not None:
        prof.__exit__(None, None, None)
        print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=25), file=sys.stderr)
    times.sort()
    med = times[len(times) // 2] if times else 0.0
    print(json.dumps({"framework": "pytorch" + ("-compile" if a.compile else ""), "version": torch.__version__,
                      "model": a.model, "params": sum(p.numel() for p in net.parameters()), "batch": a.batch,
                      "context": T, "dtype": a.dtype, "threads": torch.get_num_threads(),
                      "tokens_per_s": round(a.batch * T / med, 1) if med else 0.0, "step_s": round(med, 5),
                      "losses": losses, "max_rss_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)}))


if __name__ == "__main__":
    main()
