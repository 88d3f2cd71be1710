# PyTorch peer of `mpx bench`: speed mode ("row,..." lines) and accuracy mode ("acc,..." lines) with mpx's models and O0-O3 recipes.
#
#   python3 bench/peer_bench.py --models resnet18,dcgan --opt-levels O0,O1,O2,O3 --dtype f16,bf16 \
#       --batch 32 --steps 3 --warmup 1 --windows 3 --image-size 28 --device cpu --threads 2
#   python3 bench/peer_bench.py --accuracy --models small_cnn --opt-levels O0,O1,O2,O3 --dtype f16,bf16 \
#       --batch 128 --epochs 3 --lr 0.1 --limit-train 0 --limit-test 0 --device cpu --threads 2
#
# `mpx bench --peer` (and `mpx bench --accuracy --peer`) runs it with its own settings and merges the rows.
# GPT rows (gpt-tiny, gpt-mini, gpt2, ...) load mpx's initial weights and token batch from
# GPT_DIR/MODEL_init.safetensors (--gpt-dir, which mpx bench writes), so their losses match mpx's.
# Accuracy mode repeats `mpx train`'s recipe (tools/train.cpp): Fashion-MNIST/MNIST IDX files read
# here, ToTensor + Normalize(mean, std), shuffled batches with the last partial one dropped, SGD
# lr x batch/256 with momentum and weight decay, per-step cosine schedule, test loss/top-1 per
# epoch. PyTorch's random numbers differ from mpx's, so only the recipe is identical.
#
# The models are defined here (not imported from torchvision, which Debian's python3-torch
# lacks) to match mpx's models/: small_cnn, ResNet-18/34/50 (torchvision layout; small-input
# variant: 3x3 stem, no max pool), the DCGAN generator/discriminator at 28/32/64 px and GPT-2. Parameter counts are printed so a mismatch
# shows. Recipes (apex's definitions, as bench/peer_resnet50_cuda.py):
#   O0 f32; O1 autocast (+ GradScaler for f16 on CUDA); O2 low-precision model with f32 batch
#   and layer norms (as mpx's amp) and f32 master weights; O3 pure low precision. Peak memory: torch.cuda.max_memory_allocated
#   on CUDA; on the CPU one extra profiled step (see cpu_step_peak). Loss scale for O2/O3 f16: a static 128
#   (bf16: 1). A row PyTorch cannot run (e.g. f16 convolutions on the CPU) reports its reason.
import argparse
import json
import math
import os
import statistics
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

from peer_bench_gpt import LM_MODELS, build_gpt


class BasicBlock(nn.Module):
    expansion = 1

    def __init__(self, cin, planes, stride=1):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, planes, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.conv2 = nn.Conv2d(planes, planes, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.downsample = None
        if stride != 1 or cin != planes:
            self.downsample = nn.Sequential(nn.Conv2d(cin, planes, 1, stride, bias=False), nn.BatchNorm2d(planes))

    def forward(self, x):
        idt = x if self.downsample is None else self.downsample(x)
        out = F.relu(self.bn1(self.conv1(x)))
        return F.relu(self.bn2(self.conv2(out)) + idt)


class Bottleneck(nn.Module):
    expansion = 4

    def __init__(self, cin, planes, stride=1):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, planes, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.conv2 = nn.Conv2d(planes, planes, 3, stride, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.conv3 = nn.Conv2d(planes, planes * 4, 1, bias=False)
        self.bn3 = nn.BatchNorm2d(planes * 4)
        self.downsample = None
        if stride != 1 or cin != planes * 4:
            self.downsample = nn.Sequential(nn.Conv2d(cin, planes * 4, 1, stride, bias=False), nn.BatchNorm2d(planes * 4))

    def forward(self, x):
        idt = x if self.downsample is None else self.downsample(x)
        out = F.relu(self.bn1(self.conv1(x)))
        out = F.relu(self.bn2(self.conv2(out)))
        return F.relu(self.bn3(self.conv3(out)) + idt)


class ResNet(nn.Module):
    def __init__(self, block, layers, in_channels, num_classes, small_input, width=64):
        super().__init__()
        self.small = small_input
        if small_input:  # mpx's small-input variant: 3x3 stride-1 stem, no max pool
            self.conv1 = nn.Conv2d(in_channels, width, 3, 1, 1, bias=False)
        else:
            self.conv1 = nn.Conv2d(in_channels, width, 7, 2, 3, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        cin = width
        stages = []
        for i, n in enumerate(layers):
            planes, stride = width * 2**i, 1 if i == 0 else 2
            blocks = []
            for j in range(n):
                blocks.append(block(cin, planes, stride if j == 0 else 1))
                cin = planes * block.expansion
            stages.append(nn.Sequential(*blocks))
        self.stages = nn.Sequential(*stages)
        self.fc = nn.Linear(cin, num_classes)
        for m in self.modules():  # torchvision's (and mpx's) initialisation
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
            elif isinstance(m, nn.BatchNorm2d):
                nn.init.ones_(m.weight)
                nn.init.zeros_(m.bias)

    def forward(self, x):
        x = F.relu(self.bn1(self.conv1(x)))
        if not self.small:
            x = F.max_pool2d(x, 3, 2, 1)
        x = self.stages(x)
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))


# name: (block, blocks per stage, stem width); resnet20 is He et al.'s CIFAR net (always the small stem).
RESNETS = {"resnet18": (BasicBlock, [2, 2, 2, 2], 64), "resnet34": (BasicBlock, [3, 4, 6, 3], 64),
           "resnet50": (Bottleneck, [3, 4, 6, 3], 64), "resnet20": (BasicBlock, [3, 3, 3], 16)}


class SmallCnn(nn.Module):
    """mpx's models/small_cnn: conv3x3(16)-BN-ReLU-pool, conv3x3(32)-BN-ReLU-pool, linear (PyTorch's default init, as mpx's)."""

    def __init__(self, in_channels=1, num_classes=10):
        super().__init__()
        self.c1 = nn.Conv2d(in_channels, 16, 3, padding=1, bias=False)
        self.b1 = nn.BatchNorm2d(16)
        self.c2 = nn.Conv2d(16, 32, 3, padding=1, bias=False)
        self.b2 = nn.BatchNorm2d(32)
        self.fc = nn.Linear(32 * 7 * 7, num_classes)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.b1(self.c1(x))), 2)
        x = F.max_pool2d(F.relu(self.b2(self.c2(x))), 2)
        return self.fc(torch.flatten(x, 1))


M = 0  # a max-pool in a VGG cfg
VGG_CFGS = {"vgg11": [64, M, 128, M, 256, 256, M, 512, 512, M, 512, 512, M],
            "vgg13": [64, 64, M, 128, 128, M, 256, 256, M, 512, 512, M, 512, 512, M],
            "vgg16": [64, 64, M, 128, 128, M, 256, 256, 256, M, 512, 512, 512, M, 512, 512, 512, M],
            "vgg19": [64, 64, M, 128, 128, M, 256, 256, 256, 256, M, 512, 512, 512, 512, M, 512, 512, 512, 512, M]}


class VGG(nn.Module):
    """torchvision's VGG (mpx's models/vgg): the small-input variant drops the last max-pool and
    ends in global average pooling and one Linear layer."""

    def __init__(self, cfg, batch_norm, in_channels, num_classes, small_input, dropout=0.5):
        super().__init__()
        layers, cin = [], in_channels
        for i, v in enumerate(cfg):
            if v == M:
                if not (small_input and i + 1 == len(cfg)):
                    layers.append(nn.MaxPool2d(2, 2))
                continue
            layers.append(nn.Conv2d(cin, v, 3, padding=1))
            if batch_norm:
                layers.append(nn.BatchNorm2d(v))
            layers.append(nn.ReLU(inplace=True))
            cin = v
        self.features = nn.Sequential(*layers)
        if small_input:
            self.avgpool = nn.AdaptiveAvgPool2d(1)
            self.classifier = nn.Sequential(nn.Linear(cin, num_classes))
        else:
            self.avgpool = nn.AdaptiveAvgPool2d(7)
            self.classifier = nn.Sequential(nn.Linear(cin * 49, 4096), nn.ReLU(True), nn.Dropout(dropout),
                                            nn.Linear(4096, 4096), nn.ReLU(True), nn.Dropout(dropout),
                                            nn.Linear(4096, num_classes))
        for m in self.modules():  # torchvision's (and mpx's) initialisation
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
                nn.init.zeros_(m.bias)
            elif isinstance(m, nn.BatchNorm2d):
                nn.init.ones_(m.weight)
                nn.init.zeros_(m.bias)
            elif isinstance(m, nn.Linear):
                nn.init.normal_(m.weight, 0, 0.01)
                nn.init.zeros_(m.bias)

    def forward(self, x):
        return self.classifier(torch.flatten(self.avgpool(self.features(x)), 1))


def classifier(model, in_channels, num_classes, small_input):
    """The peer's copy of models::create for the classifiers it knows."""
    if model == "small_cnn":
        return SmallCnn(in_channels, num_classes)
    vgg = model[:-3] if model.endswith("_bn") else model
    if vgg in VGG_CFGS:
        return VGG(VGG_CFGS[vgg], model.endswith("_bn"), in_channels, num_classes, small_input)
    if model not in RESNETS:
        known = ["small_cnn", "dcgan"] + sorted(RESNETS) + [v + b for v in sorted(VGG_CFGS) for b in ("", "_bn")]
        raise ValueError(f"the peer has no {model} (it defines {', '.join(known)})")
    block, layers, width = RESNETS[model]
    return ResNet(block, layers, in_channels, num_classes, small_input or model == "resnet20", width)


def up(cin, cout, k, s, p):
    return nn.ConvTranspose2d(cin, cout, k, s, p, bias=False)


def down(cin, cout, k, s, p):
    return nn.Conv2d(cin, cout, k, s, p, bias=False)


def generator(nz, g, nc, side):
    if side == 64:
        layers = [up(nz, g * 8, 4, 1, 0), nn.BatchNorm2d(g * 8), nn.ReLU(), up(g * 8, g * 4, 4, 2, 1), nn.BatchNorm2d(g * 4),
                  nn.ReLU(), up(g * 4, g * 2, 4, 2, 1), nn.BatchNorm2d(g * 2), nn.ReLU(), up(g * 2, g, 4, 2, 1),
                  nn.BatchNorm2d(g), nn.ReLU(), up(g, nc, 4, 2, 1), nn.Tanh()]
    elif side == 32:
        layers = [up(nz, g * 4, 4, 1, 0), nn.BatchNorm2d(g * 4), nn.ReLU(), up(g * 4, g * 2, 4, 2, 1), nn.BatchNorm2d(g * 2),
                  nn.ReLU(), up(g * 2, g, 4, 2, 1), nn.BatchNorm2d(g), nn.ReLU(), up(g, nc, 4, 2, 1), nn.Tanh()]
    else:  # 28
        layers = [up(nz, g * 4, 7, 1, 0), nn.BatchNorm2d(g * 4), nn.ReLU(), up(g * 4, g * 2, 4, 2, 1), nn.BatchNorm2d(g * 2),
                  nn.ReLU(), up(g * 2, g, 4, 2, 1), nn.BatchNorm2d(g), nn.ReLU(), up(g, nc, 3, 1, 1), nn.Tanh()]
    return nn.Sequential(*layers)


def discriminator(d, nc, side):
    lr = lambda: nn.LeakyReLU(0.2)  # noqa: E731
    if side == 64:
        layers = [down(nc, d, 4, 2, 1), lr(), down(d, d * 2, 4, 2, 1), nn.BatchNorm2d(d * 2), lr(),
                  down(d * 2, d * 4, 4, 2, 1), nn.BatchNorm2d(d * 4), lr(), down(d * 4, d * 8, 4, 2, 1),
                  nn.BatchNorm2d(d * 8), lr(), down(d * 8, 1, 4, 1, 0)]
    elif side == 32:
        layers = [down(nc, d, 4, 2, 1), lr(), down(d, d * 2, 4, 2, 1), nn.BatchNorm2d(d * 2), lr(),
                  down(d * 2, d * 4, 4, 2, 1), nn.BatchNorm2d(d * 4), lr(), down(d * 4, 1, 4, 1, 0)]
    else:  # 28
        layers = [down(nc, d, 4, 2, 1), lr(), down(d, d * 2, 4, 2, 1), nn.BatchNorm2d(d * 2), lr(),
                  down(d * 2, d * 4, 3, 2, 1), nn.BatchNorm2d(d * 4), lr(), down(d * 4, 1, 4, 1, 0)]
    return nn.Sequential(*layers)


def dcgan_init(m):
    if isinstance(m, (nn.Conv2d, nn.ConvTranspose2d)):
        nn.init.normal_(m.weight, 0.0, 0.02)
    elif isinstance(m, nn.BatchNorm2d):
        nn.init.normal_(m.weight, 1.0, 0.02)
        nn.init.zeros_(m.bias)


class Recipe:
    """One network + optimizer under an opt level: forward context, backward with scaling, step."""

    instances = []  # the current row's recipes (build() starts a new list)

    def __init__(self, net, make_opt, level, low, dev, compile_net=False):
        # O3-bnf32 is O3 with keep_batchnorm_fp32=True (apex's fastest ImageNet recipe).
        bn32 = level in ("O2", "O3-bnf32")
        level = "O3" if level == "O3-bnf32" else level
        self.level, self.low, self.dev = level, low, dev
        Recipe.instances.append(self)
        self.net = net.to(dev)
        self.params = list(self.net.parameters())
        self.masters = None
        if level in ("O2", "O3"):
            self.net.to(low)
            if bn32:
                for m in self.net.modules():
                    if isinstance(m, (nn.BatchNorm2d, nn.LayerNorm)):
                        m.float()
                self.params = list(self.net.parameters())
            if level == "O2":
                self.masters = [p.detach().float().requires_grad_() for p in self.params]
        self.opt = make_opt(self.masters if self.masters is not None else self.params)
        self.scaler = None
        if level == "O1" and low == torch.float16 and dev.type == "cuda":
            self.scaler = torch.cuda.amp.GradScaler()
        self.static_scale = 128.0 if (level in ("O2", "O3") and low == torch.float16) else 1.0
        # --compile: the same module through torch.compile (default mode); parameters are shared.
        self.run = self.net
        if compile_net:
            if not hasattr(torch, "compile"):
                raise RuntimeError(f"torch.compile needs PyTorch 2 (this is {torch.__version__})")
            self.run = torch.compile(self.net)

    def live_bytes(self):
        """Bytes of what lives between steps: parameters, buffers, masters, optimizer state."""
        ts = list(self.net.parameters()) + list(self.net.buffers()) + (self.masters or [])
        ts += [v for st in self.opt.state.values() for v in st.values() if torch.is_tensor(v)]
        return sum(t.numel() * t.element_size() for t in ts)

    def forward(self, x):
        if self.level == "O1":
            with torch.autocast(self.dev.type, dtype=self.low):
                return self.run(x).float()
        if self.level in ("O2", "O3") and x.is_floating_point():  # token ids stay integers
            x = x.to(self.low)
        return self.run(x).float()

    def zero_grad(self):
        self.opt.zero_grad(set_to_none=True)
        self.net.zero_grad(set_to_none=True)

    def backward(self, loss):
        if self.scaler is not None:
            self.scaler.scale(loss).backward()
        else:
            (loss * self.static_scale).backward()

    def step(self, clip=0.0):
        """The optimizer step on unscaled gradients; with clip > 0 their norm (the masters' where
        there are masters, as amp clips) is clipped to it first."""
        if self.scaler is not None:
            if clip > 0:
                self.scaler.unscale_(self.opt)
                torch.nn.utils.clip_grad_norm_(self.params, clip)
            self.scaler.step(self.opt)
            self.scaler.update()
            return
        s = self.static_scale
        if self.masters is not None:
            for m, p in zip(self.masters, self.params):
                m.grad = None if p.grad is None else p.grad.float() / s
            if clip > 0:
                torch.nn.utils.clip_grad_norm_(self.masters, clip)
            self.opt.step()
            with torch.no_grad():
                for m, p in zip(self.masters, self.params):
                    p.copy_(m)
        else:
            if s != 1.0:
                with torch.no_grad():
                    for p in self.params:
                        if p.grad is not None:
                            p.grad.div_(s)
            if clip > 0:
                torch.nn.utils.clip_grad_norm_(self.params, clip)
            self.opt.step()


def build(model, level, low, a, dev):
    """Returns (step function, parameter count, bytes living between steps, samples per step)."""
    Recipe.instances = []
    if model in LM_MODELS:
        return build_gpt(model, level, low, a, dev, Recipe, tensor_bytes)
    side = a.image_size
    fmt = torch.channels_last if a.channels_last else torch.contiguous_format
    if model == "dcgan":
        side = 28 if side == 28 else (32 if side <= 32 else 64)
        nc, width, nz = (1 if side == 28 else 3), (32 if side <= 32 else 64), 100
        G, D = generator(nz, width, nc, side), discriminator(width, nc, side)
        G.apply(dcgan_init)
        D.apply(dcgan_init)
        nparams = sum(p.numel() for p in G.parameters()) + sum(p.numel() for p in D.parameters())
        adam = lambda ps: torch.optim.Adam(ps, lr=2e-4, betas=(0.5, 0.999))  # noqa: E731
        G, D = G.to(memory_format=fmt), D.to(memory_format=fmt)
        rd, rg = Recipe(D, adam, level, low, dev, a.compile), Recipe(G, adam, level, low, dev, a.compile)
        real = (torch.rand(a.batch, nc, side, side) * 2 - 1).to(dev).to(memory_format=fmt)
        ones, zeros = torch.ones(a.batch, device=dev), torch.zeros(a.batch, device=dev)

        def step():
            rd.zero_grad()
            err_real = F.binary_cross_entropy_with_logits(rd.forward(real).reshape(-1), ones)
            rd.backward(err_real)
            noise = torch.randn(a.batch, nz, 1, 1, device=dev)
            fake = rg.forward(noise)
            err_fake = F.binary_cross_entropy_with_logits(rd.forward(fake.detach()).reshape(-1), zeros)
            rd.backward(err_fake)
            rd.step()
            rg.zero_grad()
            err_g = F.binary_cross_entropy_with_logits(rd.forward(fake).reshape(-1), ones)
            rg.backward(err_g)
            rg.step()
            return err_g

        return step, nparams, lambda: rd.live_bytes() + rg.live_bytes() + tensor_bytes(real, ones, zeros), a.batch
    nc, classes = (1 if side == 28 else 3), (10 if side <= 32 else 1000)
    net = classifier(model, nc, classes, side <= 32)
    nparams = sum(p.numel() for p in net.parameters())
    net = net.to(memory_format=fmt)
    sgd = lambda ps: torch.optim.SGD(ps, lr=0.01, momentum=0.9, weight_decay=1e-4)  # noqa: E731
    r = Recipe(net, sgd, level, low, dev, a.compile)
    x = torch.randn(a.batch, nc, side, side).to(dev).to(memory_format=fmt)
    y = torch.randint(0, classes, (a.batch,)).to(dev)

    def step():
        r.zero_grad()
        loss = F.cross_entropy(r.forward(x), y)
        r.backward(loss)
        r.step()
        return loss

    return step, nparams, lambda: r.live_bytes() + tensor_bytes(x, y), a.batch


def tensor_bytes(*ts):
    return sum(t.numel() * t.element_size() for t in ts)


def cpu_step_peak(step, live):
    """Peak CPU tensor bytes of one step: what lives between steps plus the largest growth of
    the allocations torch's profiler records (torch has no CPU allocator statistics). Every
    allocation and release is one timestamped event of its trace, summed in time order; the
    per-op totals of prof.events() would misplace them (an autograd node's releases are charged
    at its start, before its ops allocate, hiding its peak). The profiler never sees a tensor
    freed that was allocated before it started, so the gradients the last step left (alive until
    their zero_grad, which may come mid-step: DCGAN's generator) are copied under it first. A
    lower bound still: allocations outside torch's allocator (oneDNN's scratch) are not seen."""
    import tempfile
    from torch.profiler import ProfilerActivity, profile

    base = live()
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        with torch.no_grad():
            for r in Recipe.instances:
                for p in r.params + (r.masters or []):
                    if p.grad is not None:
                        p.grad = p.grad.clone()
        step()
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "trace.json")
        prof.export_chrome_trace(path)
        with open(path) as f:
            events = json.load(f)["traceEvents"]
    mem = sorted((e["ts"], e["args"]["Bytes"]) for e in events
                 if e.get("name") == "[memory]" and e.get("args", {}).get("Device Type", 0) == 0)
    if not mem:  # a trace without allocation events (an older torch): the per-op totals, cruder
        mem = [(e.time_range.start, e.cpu_memory_usage if e.name == "[memory]" else e.self_cpu_memory_usage)
               for e in prof.events()]
        mem.sort(key=lambda m: m[0])
    cur = peak = 0
    for _, nbytes in mem:
        cur += nbytes
        peak = max(peak, cur)
    return base + peak


def sync(dev):
    if dev.type == "cuda":
        torch.cuda.synchronize()


def profile_window(step, a, dev, title):
    """One more window under torch.profiler, as mpx bench --profile: per-op self time, ms per step."""
    from torch.profiler import ProfilerActivity, profile

    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if dev.type == "cuda" else [])
    with profile(activities=acts) as prof:
        for _ in range(a.steps):
            step()
        sync(dev)
    attr = "self_device_time_total" if dev.type == "cuda" else "self_cpu_time_total"
    ev = sorted(prof.key_averages(), key=lambda e: getattr(e, attr), reverse=True)
    total = sum(getattr(e, attr) for e in ev) / 1000 / a.steps
    print(f"PyTorch ops of {title}, {a.steps} steps: self time, ms per step (total {total:.1f})")
    for e in ev[:20]:
        print(f"  {e.key[:40]:40} {e.count // a.steps:6d} calls {getattr(e, attr) / 1000 / a.steps:9.3f} ms")


def run_row(model, level, dname, a, dev):
    low = {"f16": torch.float16, "bf16": torch.bfloat16, "f32": torch.float32}[dname]
    torch.manual_seed(a.seed)
    step, nparams, live, batch = build(model, level, low, a, dev)
    for _ in range(a.warmup):
        step()
    sync(dev)
    if dev.type == "cuda":  # the timed steps' peak, as mpx bench's
        torch.cuda.reset_peak_memory_stats()
    secs = []
    for _ in range(a.windows):
        t0 = time.perf_counter()
        for _ in range(a.steps):
            loss = step()
        final_loss = loss.item()  # the whole window has finished
        sync(dev)
        secs.append(time.perf_counter() - t0)
    ips = sorted(batch * a.steps / s for s in secs)
    # The loss is that of the last timed step, as mpx's: cpu_step_peak's extra step comes after.
    peak = (torch.cuda.max_memory_allocated() if dev.type == "cuda" else cpu_step_peak(step, live)) / 2**20
    if a.profile:
        profile_window(step, a, dev, f"{model} {level} {dname}")
    return nparams, statistics.median(ips), ips[0], ips[-1], 1000 * statistics.median(secs) / a.steps, peak, final_loss


def main():
    ap = argparse.ArgumentParser(description="PyTorch peer of mpx bench (speed mode; --accuracy: accuracy mode)")
    ap.add_argument("--accuracy", action="store_true", help="train each level with mpx train's recipe")
    ap.add_argument("--epochs", type=int, default=8)
    ap.add_argument("--lr", type=float, default=0.1, help="base lr, scaled by batch/256 as mpx train")
    ap.add_argument("--momentum", type=float, default=0.9)
    ap.add_argument("--weight-decay", type=float, default=1e-4)
    ap.add_argument("--limit-train", type=int, default=0)
    ap.add_argument("--limit-test", type=int, default=0)
    ap.add_argument("--dataset", default="fashion-mnist")
    ap.add_argument("--data", default="", help="the data set's folder (default: Debian's)")
    ap.add_argument("--models", default="resnet18,dcgan")
    ap.add_argument("--opt-levels", default="O0,O1,O2,O3")
    ap.add_argument("--dtype", default="f16")
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--windows", type=int, default=3)
    ap.add_argument("--image-size", type=int, default=28)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--channels-last", action="store_true", help="models and inputs in torch.channels_last")
    ap.add_argument("--compile", action="store_true", help="speed mode: the models through torch.compile")
    ap.add_argument("--profile", action="store_true", help="speed mode: one more window under torch.profiler, "
                    "its per-op self times printed per row")
    ap.add_argument("--tf32", action="store_true", help="CUDA: f32 convolutions and matmuls on TF32 (mpx bench --tf32)")
    ap.add_argument("--gpt-dir", default="out/bench", help="where mpx bench wrote MODEL_init.safetensors (its --out)")
    a = ap.parse_args()
    if a.threads:
        torch.set_num_threads(a.threads)
    dev = torch.device(a.device)
    if dev.type == "cuda":
        torch.backends.cudnn.benchmark = True
        # mpx keeps f32 exact unless --tf32; torch's convolutions default to TF32, so set both ways.
        torch.backends.cudnn.allow_tf32 = a.tf32
        torch.backends.cuda.matmul.allow_tf32 = a.tf32
    print(f"torch {torch.__version__}, {a.device}, {torch.get_num_threads()} threads")
    rows = []
    for m in a.models.split(","):
        for level in a.opt_levels.split(","):
            for d in (["f32"] if level == "O0" else a.dtype.split(",")):
                rows.append((m, level, d))
    if a.accuracy:
        from peer_accuracy import accuracy_main

        accuracy_main(a, dev, rows, Recipe, classifier)
        return
    counted = set()
    for m, level, d in rows:
        try:
            nparams, med, lo, hi, ms, peak, loss = run_row(m, level, d, a, dev)
            status = "ok"
        except Exception as e:  # noqa: BLE001 - a row PyTorch cannot run is reported, not fatal
            nparams, med, lo, hi, ms, peak, loss = (0,) + (float("nan"),) * 6
            msg = str(e).splitlines()[0] if str(e) else type(e).__name__
            status = "unsupported: " + msg.replace(",", ";")[:80]
        if nparams and m not in counted:
            counted.add(m)
            print(f"params {m}: {nparams:,}")
        unit = "sequences/s" if m in LM_MODELS else "images/s"
        print(f"{m:9} {level} {d:4} {med:9.1f} {unit} ({lo:.1f}-{hi:.1f}) final loss {loss:.6f} {status}")
        print(f"row,{m},{level},{d},{nparams},{med},{lo},{hi},{ms},{peak},{loss},{status}", flush=True)


if __name__ == "__main__":
    main()
