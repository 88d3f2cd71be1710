# PyTorch peer for mpx's CPU training-throughput benchmark: CIFAR-style ResNet-18 on synthetic 1x28x28 data.
#
#   /usr/bin/python3 bench/peer_resnet18_cpu.py [--batch 128] [--warmup 3] [--steps 10] [--threads N] [--json]
#
# The model is defined here rather than imported from torchvision so the peer has
# no extra dependency; BasicBlock mirrors torchvision.models.resnet.BasicBlock.

import argparse
import json
import statistics
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


def conv3x3(cin, cout, stride=1):
    return nn.Conv2d(cin, cout, kernel_size=3, stride=stride, padding=1, bias=False)


class BasicBlock(nn.Module):
    def __init__(self, cin, cout, stride=1):
        super().__init__()
        self.conv1 = conv3x3(cin, cout, stride)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = conv3x3(cout, cout)
        self.bn2 = nn.BatchNorm2d(cout)
        self.downsample = None
        if stride != 1 or cin != cout:
            self.downsample = nn.Sequential(
                nn.Conv2d(cin, cout, kernel_size=1, stride=stride, bias=False),
                nn.BatchNorm2d(cout),
            )

    def forward(self, x):
        identity = x if self.downsample is None else self.downsample(x)
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return F.relu(out + identity)


class ResNet18(nn.Module):
    def __init__(self, in_channels=1, num_classes=10, width=64):
        super().__init__()
        # CIFAR stem: 3x3 stride 1 and no max pool, since 28x28 inputs are too small for the ImageNet stem.
        self.conv1 = conv3x3(in_channels, width)
        self.bn1 = nn.BatchNorm2d(width)
        widths = [width, width * 2, width * 4, width * 8]
        strides = [1, 2, 2, 2]
        layers = []
        cin = width
        for w, s in zip(widths, strides):
            layers.append(nn.Sequential(BasicBlock(cin, w, s), BasicBlock(w, w, 1)))
            cin = w
        self.layers = nn.Sequential(*layers)
        self.fc = nn.Linear(cin, num_classes)

    def forward(self, x):
        x = F.relu(self.bn1(self.conv1(x)))
        x = self.layers(x)
        x = F.adaptive_avg_pool2d(x, 1).flatten(1)
        return self.fc(x)


def main():
    ap = argparse.ArgumentParser(description="PyTorch CPU ResNet-18 training throughput peer")
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--threads", type=int, default=None, help="torch intra-op threads (default: torch's default)")
    ap.add_argument("--json", action="store_true", help="print a single JSON line instead of text")
    args = ap.parse_args()

    if args.threads is not None:
        torch.set_num_threads(args.threads)
    torch.manual_seed(0)

    model = ResNet18().train()
    nparams = sum(p.numel() for p in model.parameters())
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=5e-4)
    x = torch.randn(args.batch, 1, 28, 28)
    y = torch.randint(0, 10, (args.batch,))

    def step():
        opt.zero_grad(set_to_none=True)
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        return loss.item()  # forces completion so the timing covers the whole step

    for _ in range(args.warmup):
        step()
    times = []
    for _ in range(args.steps):
        t0 = time.perf_counter()
        step()
        times.append(time.perf_counter() - t0)

    ips = [args.batch / t for t in times]
    result = {
        "bench": "resnet18_cpu_train",
        "framework": "torch",
        "torch_version": torch.__version__,
        "threads": torch.get_num_threads(),
        "batch": args.batch,
        "warmup": args.warmup,
        "steps": args.steps,
        "params": nparams,
        "images_per_s_median": statistics.median(ips),
        "images_per_s_min": min(ips),
        "images_per_s_max": max(ips),
        "step_s_median": statistics.median(times),
    }
    if args.json:
        print(json.dumps(result))
    else:
        print(f"torch {result['torch_version']}, threads {result['threads']}, params {nparams:,}")
        print(f"batch {args.batch}, warmup {args.warmup}, timed steps {args.steps}")
        print(f"images/s: median {result['images_per_s_median']:.1f} "
              f"(min {result['images_per_s_min']:.1f}, max {result['images_per_s_max']:.1f}); "
              f"step median {result['step_s_median'] * 1e3:.1f} ms")


if __name__ == "__main__":
    main()
