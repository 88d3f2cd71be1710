# PyTorch peer of bench/bench_amp_cuda.cpp's MLP step: the same model, batch and recipe at apex's
# O0-O3 (O1 autocast + GradScaler, O2 half model with f32 master weights, O3 pure half).
import statistics
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F


def mlp():
    return nn.Sequential(nn.Linear(1024, 4096), nn.ReLU(), nn.Linear(4096, 4096), nn.ReLU(), nn.Linear(4096, 1000))


def run(level, low, batch=512):
    torch.manual_seed(0)
    dev = torch.device("cuda")
    net = mlp().to(dev)
    x = torch.randn(batch, 1024, device=dev)
    y = torch.randint(0, 1000, (batch,), device=dev)
    scaler = None
    masters = None
    if level == "O0":
        opt = torch.optim.SGD(net.parameters(), lr=0.01, momentum=0.9)
    elif level == "O1":
        opt = torch.optim.SGD(net.parameters(), lr=0.01, momentum=0.9)
        scaler = torch.amp.GradScaler("cuda", enabled=low == torch.float16)
    else:
        net = net.to(low)
        if level == "O2":
            masters = [p.detach().float().requires_grad_() for p in net.parameters()]
            opt = torch.optim.SGD(masters, lr=0.01, momentum=0.9)
        else:
            opt = torch.optim.SGD(net.parameters(), lr=0.01, momentum=0.9)
        scale = 1.0 if low == torch.bfloat16 else 128.0

    def step():
        opt.zero_grad(set_to_none=True)
        if level == "O1":
            with torch.autocast("cuda", dtype=low):
                loss = F.cross_entropy(net(x), y)
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()
        elif level == "O0":
            F.cross_entropy(net(x), y).backward()
            opt.step()
        else:
            net.zero_grad(set_to_none=True)
            loss = F.cross_entropy(net(x.to(low)).float(), y)
            (loss * scale).backward()
            if masters is not None:
                for m, p in zip(masters, net.parameters()):
                    m.grad = p.grad.float() / scale
                opt.step()
                with torch.no_grad():
                    for m, p in zip(masters, net.parameters()):
                        p.copy_(m)
            else:
                with torch.no_grad():
                    for p in net.parameters():
                        p.grad.div_(scale)
                opt.step()

    def window(warmup, runs):
        for _ in range(warmup):
            step()
        torch.cuda.synchronize()
        ms = []
        for _ in range(runs):
            a = torch.cuda.Event(enable_timing=True)
            b = torch.cuda.Event(enable_timing=True)
            a.record()
            step()
            b.record()
            b.synchronize()
            ms.append(a.elapsed_time(b))
        return statistics.median(ms)

    per_s = sorted(batch / (window(10 if w == 0 else 2, 10) / 1000.0) for w in range(5))
    med = per_s[len(per_s) // 2]
    name = "f16" if low == torch.float16 else "bf16"
    print(f"torch mlp {level:3} {name:4} batch {batch}: {med:10.0f} samples/s (spread {per_s[0]:.0f}-{per_s[-1]:.0f})")
    print(f"csv,torch_mlp,{level},{name},{batch},{med:.1f}")
    sys.stdout.flush()


if __name__ == "__main__":
    torch.backends.cuda.matmul.allow_tf32 = False
    print(torch.__version__, torch.cuda.get_device_name())
    for batch in [512, 4096]:
        for level in ["O0", "O1", "O2", "O3"]:
            run(level, torch.float16, batch)
        for level in ["O1", "O2", "O3"]:
            run(level, torch.bfloat16, batch)
