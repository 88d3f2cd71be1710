# PyTorch peer of bench/bench_resnet50_cuda.cpp: torchvision ResNet-50, channels_last, synthetic
# 224x224 data, SGD momentum; O0 f32 (TF32 convolutions, PyTorch's default), O1 autocast +
# GradScaler, O2 half model with f32 batch norm and f32 master weights, O3 pure half.
import sys

import torch
import torch.nn.functional as F
import torchvision


def run(level, low, batch, windows=3, steps=5):
    torch.manual_seed(0)
    dev = torch.device("cuda")
    net = torchvision.models.resnet50().to(dev).to(memory_format=torch.channels_last)
    x = torch.randn(batch, 3, 224, 224, device=dev).to(memory_format=torch.channels_last)
    y = torch.randint(0, 1000, (batch,), device=dev)
    scaler = None
    masters = None
    params = list(net.parameters())
    if level in ("O2", "O3"):
        net = net.to(low)
        if level == "O2":
            for m in net.modules():
                if isinstance(m, torch.nn.BatchNorm2d):
                    m.float()
            params = list(net.parameters())
            masters = [p.detach().float().requires_grad_() for p in params]
    opt = torch.optim.SGD(masters if masters is not None else params, lr=0.1, momentum=0.9, weight_decay=1e-4)
    if level == "O1":
        scaler = torch.amp.GradScaler("cuda", enabled=low == torch.float16)
    scale = 1.0 if low == torch.bfloat16 else 128.0

    def step():
        opt.zero_grad(set_to_none=True)
        if level == "O0":
            F.cross_entropy(net(x), y).backward()
            opt.step()
        elif level == "O1":
            with torch.autocast("cuda", dtype=low):
                loss = F.cross_entropy(net(x), y)
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()
        else:
            net.zero_grad(set_to_none=True)
            loss = F.cross_entropy(net(x.to(low)).float(), y)
            (loss * scale).backward()
            if masters is not None:
                for m, p in zip(masters, params):
                    m.grad = p.grad.float() / scale
                opt.step()
                with torch.no_grad():
                    for m, p in zip(masters, params):
                        p.copy_(m)
            else:
                with torch.no_grad():
                    for p in params:
                        p.grad.div_(scale)
                opt.step()

    for _ in range(3):
        step()
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    per_s = []
    for _ in range(windows):
        a = torch.cuda.Event(enable_timing=True)
        b = torch.cuda.Event(enable_timing=True)
        a.record()
        for _ in range(steps):
            step()
        b.record()
        b.synchronize()
        per_s.append(batch * steps / (a.elapsed_time(b) / 1000.0))
    per_s.sort()
    med = per_s[len(per_s) // 2]
    peak = torch.cuda.max_memory_allocated() / 2**30
    name = "f16" if low == torch.float16 else "bf16"
    print(f"torch resnet50 {level:3} {name:4} batch {batch}: {med:8.0f} images/s "
          f"(spread {per_s[0]:.0f}-{per_s[-1]:.0f}), peak {peak:.1f} GiB")
    print(f"csv,torch_resnet50,{level},{name},{batch},{med:.1f},{peak:.2f}")
    sys.stdout.flush()
    del net, opt


if __name__ == "__main__":
    torch.backends.cudnn.benchmark = False
    torch.backends.cuda.matmul.allow_tf32 = True
    batch = int(sys.argv[1]) if len(sys.argv) > 1 else 256
    print(torch.__version__, torch.cuda.get_device_name(), "cuDNN", torch.backends.cudnn.version())
    for level in ["O0", "O1", "O2", "O3"]:
        run(level, torch.float16, batch)
    run("O1", torch.bfloat16, batch)
