# PyTorch peer of `mpx bench` (speed mode): same models, data shapes, optimizers and O0-O3 recipes; prints one "row,..." line per row.
#
#   python3 bench/peer_bench.py --models resnet18,dcgan --opt-levels O0,O1,O2,O3 --dtype f16,bf16 \
#       --batch 32 --steps 3 --warmup 1 --windows 3 --image-size 28 --device cpu --threads 2
#
# `mpx bench --peer` runs it with its own settings and merges the rows. The models are defined
# here (not imported from torchvision, which Debian's python3-torch lacks) to match mpx's
# models/: ResNet-18/34/50 (torchvision layout; small-input variant: 3x3 stem, no max pool) and
# the DCGAN generator/discriminator at 28/32/64 px. Parameter counts are printed so a mismatch
# shows. Recipes (apex's definitions, as bench/peer_resnet50_cuda.py):
#   O0 f32; O1 autocast (+ GradScaler for f16 on CUDA); O2 low-precision model with f32 batch
#   norm and f32 master weights; O3 pure low precision. Loss scale for O2/O3 f16: a static 128
#   (bf16: 1). A row PyTorch cannot run (e.g. f16 convolutions on the CPU) reports its reason.
import argparse
import statistics
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


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
    def __init__(self, block, layers, in_channels, num_classes, small_input):
        super().__init__()
        self.small = small_input
        if small_input:  # mpx's small-input variant: 3x3 stride-1 stem, no max pool
            self.conv1 = nn.Conv2d(in_channels, 64, 3, 1, 1, bias=False)
        else:
            self.conv1 = nn.Conv2d(in_channels, 64, 7, 2, 3, bias=False)
        self.bn1 = nn.BatchNorm2d(64)
        cin = 64
        stages = []
        for i, n in enumerate(layers):
            planes, stride = 64 * 2**i, 1 if i == 0 else 2
            blocks = []
            for j in range(n):
                blocks.append(block(cin, planes, stride if j == 0 else 1))
                cin = planes * block.expansion
            stages.append(nn.Sequential(*blocks))
        self.layer1, self.layer2, self.layer3, self.layer4 = stages
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
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))


RESNETS = {"resnet18": (BasicBlock, [2, 2, 2, 2]), "resnet34": (BasicBlock, [3, 4, 6, 3]),
           "resnet50": (Bottleneck, [3, 4, 6, 3])}


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

    def __init__(self, net, make_opt, level, low, dev):
        self.level, self.low, self.dev = level, low, dev
        self.net = net.to(dev)
        self.params = list(self.net.parameters())
        self.masters = None
        if level in ("O2", "O3"):
            self.net.to(low)
            if level == "O2":
                for m in self.net.modules():
                    if isinstance(m, nn.BatchNorm2d):
                        m.float()
                self.params = list(self.net.parameters())
                self.masters = [p.detach().float().requires_grad_() for p in self.params]
        self.opt = make_opt(self.masters if self.masters is not None else self.params)
        self.scaler = None
        if level == "O1" and low == torch.float16 and dev.type == "cuda":
            self.scaler = torch.cuda.amp.GradScaler()
        self.static_scale = 128.0 if (level in ("O2", "O3") and low == torch.float16) else 1.0

    def forward(self, x):
        if self.level == "O1":
            with torch.autocast(self.dev.type, dtype=self.low):
                return self.net(x).float()
        if self.level in ("O2", "O3"):
            x = x.to(self.low)
        return self.net(x).float()

    def zero_grad(self):
        self.opt.zero_grad(set_to_none=True)
        self.net.zero_grad(set_to_none=True)

    def backward(self, loss):
        if self.scaler is not None:
            self.scaler.scale(loss).backward()
        else:
            (loss * self.static_scale).backward()

    def step(self):
        if self.scaler is not None:
            self.scaler.step(self.opt)
            self.scaler.update()
            return
        s = self.static_scale
        if self.masters is not None:
            for m, p in zip(self.masters, self.params):
                m.grad = None if p.grad is None else p.grad.float() / s
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
            self.opt.step()


def build(model, level, low, a, dev):
    """Returns (step function, parameter count, batch)."""
    side = a.image_size
    if model == "dcgan":
        side = 28 if side == 28 else (32 if side <= 32 else 64)
        nc, width, nz = (1 if side == 28 else 3), (32 if side <= 32 else 64), 100
        G, D = generator(nz, width, nc, side), discriminator(width, nc, side)
        G.apply(dcgan_init)
        D.apply(dcgan_init)
        nparams = sum(p.numel() for p in G.parameters()) + sum(p.numel() for p in D.parameters())
        adam = lambda ps: torch.optim.Adam(ps, lr=2e-4, betas=(0.5, 0.999))  # noqa: E731
        rd, rg = Recipe(D, adam, level, low, dev), Recipe(G, adam, level, low, dev)
        real = (torch.rand(a.batch, nc, side, side) * 2 - 1).to(dev)
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

        return step, nparams
    if model not in RESNETS:
        raise ValueError(f"the peer has no {model} (it defines {', '.join(sorted(RESNETS))} and dcgan)")
    nc, classes = (1 if side == 28 else 3), (10 if side <= 32 else 1000)
    block, layers = RESNETS[model]
    net = ResNet(block, layers, nc, classes, side <= 32)
    nparams = sum(p.numel() for p in net.parameters())
    sgd = lambda ps: torch.optim.SGD(ps, lr=0.01, momentum=0.9, weight_decay=1e-4)  # noqa: E731
    r = Recipe(net, sgd, level, low, dev)
    x = torch.randn(a.batch, nc, side, side).to(dev)
    y = torch.randint(0, classes, (a.batch,)).to(dev)

    def step():
        r.zero_grad()
        loss = F.cross_entropy(r.forward(x), y)
        r.backward(loss)
        r.step()
        return loss

    return step, nparams


def sync(dev):
    if dev.type == "cuda":
        torch.cuda.synchronize()


def run_row(model, level, dname, a, dev):
    low = {"f16": torch.float16, "bf16": torch.bfloat16, "f32": torch.float32}[dname]
    torch.manual_seed(a.seed)
    if dev.type == "cuda":
        torch.cuda.reset_peak_memory_stats()
    step, nparams = build(model, level, low, a, dev)
    for _ in range(a.warmup):
        step()
    sync(dev)
    secs = []
    for _ in range(a.windows):
        t0 = time.perf_counter()
        for _ in range(a.steps):
            loss = step()
        loss.item()  # the whole window has finished
        sync(dev)
        secs.append(time.perf_counter() - t0)
    ips = sorted(a.batch * a.steps / s for s in secs)
    peak = torch.cuda.max_memory_allocated() / 2**20 if dev.type == "cuda" else float("nan")
    return nparams, statistics.median(ips), ips[0], ips[-1], 1000 * statistics.median(secs) / a.steps, peak


def main():
    ap = argparse.ArgumentParser(description="PyTorch peer of mpx bench (speed mode)")
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
    a = ap.parse_args()
    if a.threads:
        torch.set_num_threads(a.threads)
    dev = torch.device(a.device)
    if dev.type == "cuda":
        torch.backends.cudnn.benchmark = True
    print(f"torch {torch.__version__}, {a.device}, {torch.get_num_threads()} threads")
    rows = []
    for m in a.models.split(","):
        for level in a.opt_levels.split(","):
            for d in (["f32"] if level == "O0" else a.dtype.split(",")):
                rows.append((m, level, d))
    counted = set()
    for m, level, d in rows:
        try:
            nparams, med, lo, hi, ms, peak = run_row(m, level, d, a, dev)
            status = "ok"
        except Exception as e:  # noqa: BLE001 - a row PyTorch cannot run is reported, not fatal
            nparams, med, lo, hi, ms, peak = 0, float("nan"), float("nan"), float("nan"), float("nan"), float("nan")
            msg = str(e).splitlines()[0] if str(e) else type(e).__name__
            status = "unsupported: " + msg.replace(",", ";")[:80]
        if nparams and m not in counted:
            counted.add(m)
            print(f"params {m}: {nparams:,}")
        print(f"{m:9} {level} {d:4} {med:9.1f} images/s ({lo:.1f}-{hi:.1f}) {status}")
        print(f"row,{m},{level},{d},{nparams},{med},{lo},{hi},{ms},{peak},{status}", flush=True)


if __name__ == "__main__":
    main()
