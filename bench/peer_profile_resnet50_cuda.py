# PyTorch side of `mpx bench --profile` for ResNet-50 at O1: where one autocast + GradScaler step's
# device time goes per aten op (torch.profiler), channels_last, synthetic data, SGD momentum.
# Usage: python3 bench/peer_profile_resnet50_cuda.py [batch] [f16|bf16]
import sys
import time

import torch
import torch.nn.functional as F
import torchvision
from torch.profiler import ProfilerActivity, profile


def main():
    batch = int(sys.argv[1]) if len(sys.argv) > 1 else 256
    low = torch.bfloat16 if len(sys.argv) > 2 and sys.argv[2] == "bf16" else torch.float16
    dev = torch.device("cuda")
    torch.manual_seed(0)
    net = torchvision.models.resnet50().to(dev).to(memory_format=torch.channels_last)
    x = torch.randn(batch, 3, 224, 224, device=dev).to(memory_format=torch.channels_last)
    y = torch.randint(0, 1000, (batch,), device=dev)
    opt = torch.optim.SGD(net.parameters(), lr=0.1, momentum=0.9, weight_decay=1e-4)
    scaler = torch.amp.GradScaler("cuda", enabled=low == torch.float16)

    def step():
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=low):
            loss = F.cross_entropy(net(x), y)
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()

    for _ in range(3):
        step()
    torch.cuda.synchronize()
    steps = 5
    t0 = time.perf_counter()
    for _ in range(steps):
        step()
    torch.cuda.synchronize()
    wall = (time.perf_counter() - t0) / steps
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(steps):
            step()
        torch.cuda.synchronize()
    print(f"torch {torch.__version__} resnet50 O1 {'bf16' if low == torch.bfloat16 else 'f16'} batch {batch}: "
          f"{wall * 1e3:.1f} ms/step ({batch / wall:.0f} images/s), profiled over {steps} steps")
    key = "self_device_time_total"
    try:
        table = prof.key_averages().table(sort_by=key, row_limit=25)
    except Exception:  # older PyTorch names it after CUDA
        table = prof.key_averages().table(sort_by="self_cuda_time_total", row_limit=25)
    print(table)


if __name__ == "__main__":
    main()
