# Accuracy mode of bench/peer_bench.py: mpx train's recipe on the IDX data sets, and mpx gpt's runs replayed for GPT presets.
import math
import time

import torch
import torch.nn.functional as F

from peer_bench_gpt import LM_MODELS, gpt_accuracy_row


# mpx train's data sets the peer can read: default folder (tools/common.cpp's default_root;
# Fashion-MNIST's is data/idx.h's kFashionMnistDir) and Normalize's mean/std (open_data).
IDX_SETS = {"fashion-mnist": ("/usr/share/datasets/fashion-mnist", 0.2860, 0.3530),
            "mnist": ("/usr/share/datasets/mnist", 0.1307, 0.3081)}


def read_idx(path):
    """An unsigned-byte IDX file (plain or gzip'd) as a uint8 numpy array of its dimensions."""
    import gzip
    import struct

    import numpy as np

    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rb") as f:
        raw = f.read()
    magic = struct.unpack(">I", raw[:4])[0]
    if magic >> 8 != 0x08 or not 1 <= (magic & 0xFF) <= 4:
        raise ValueError(f"{path}: not an unsigned-byte IDX file (magic {magic:#010x}); is it an MNIST-format file?")
    ndim = magic & 0xFF
    dims = struct.unpack(">" + "I" * ndim, raw[4:4 + 4 * ndim])
    body = raw[4 + 4 * ndim:]
    count = 1
    for d in dims:
        count *= d
    if len(body) != count:
        raise ValueError(f"{path}: {len(body)} bytes of data for dimensions {dims} ({count} expected); the file is "
                         "truncated or has trailing bytes, reinstall it")
    return np.frombuffer(body, dtype=np.uint8).reshape(dims)


def load_split(root, train, mean, std, limit):
    """(images f32 [N,1,28,28] normalized as mpx's ToTensor + Normalize, labels i64 [N]), first `limit` if > 0."""
    import os

    import numpy as np

    stem = "train" if train else "t10k"
    paths = []
    for kind in ("images-idx3", "labels-idx1"):
        base = os.path.join(root, f"{stem}-{kind}-ubyte")
        path = base + ".gz" if os.path.exists(base + ".gz") else base
        if not os.path.exists(path):
            raise FileNotFoundError(f"{base}[.gz] not found; install Debian's dataset-fashion-mnist or pass --data DIR")
        paths.append(path)
    images, labels = read_idx(paths[0]), read_idx(paths[1])
    if images.shape[0] != labels.shape[0]:
        raise ValueError(f"{paths[0]} has {images.shape[0]} images but {paths[1]} {labels.shape[0]} labels")
    if limit > 0:
        images, labels = images[:limit], labels[:limit]
    x = (images.astype(np.float32) / np.float32(255.0) - np.float32(mean)) / np.float32(std)
    return torch.from_numpy(x).unsqueeze(1).contiguous(), torch.from_numpy(labels.astype(np.int64))


def cosine_lr(base, step, total):
    """tools/train.cpp's lr_at("cosine"): per step, to 0 at the end."""
    return base * 0.5 * (1.0 + math.cos(math.pi * min(1.0, step / max(1, total))))


def evaluate(r, x, y, batch):
    r.net.eval()
    loss_sum, hits = 0.0, 0
    with torch.no_grad():
        for i in range(0, x.shape[0], batch):
            xb, yb = x[i:i + batch].to(r.dev), y[i:i + batch].to(r.dev)
            logits = r.forward(xb)
            loss_sum += F.cross_entropy(logits, yb).item() * yb.shape[0]
            hits += (logits.argmax(1) == yb).sum().item()
    r.net.train()
    n = max(1, x.shape[0])
    return loss_sum / n, 100.0 * hits / n


def train_row(model, level, dname, a, dev, data, Recipe, classifier):
    """One level trained with mpx train's recipe; returns (params, final top-1, best top-1, train loss, test loss, s, img/s)."""
    low = {"f16": torch.float16, "bf16": torch.bfloat16, "f32": torch.float32}[dname]
    (xtr, ytr), (xte, yte) = data
    torch.manual_seed(a.seed)
    net = classifier(model, 1, 10, True)
    nparams = sum(p.numel() for p in net.parameters())
    base_lr = a.lr * a.batch / 256.0  # apex: lr x global batch / 256
    sgd = lambda ps: torch.optim.SGD(ps, lr=base_lr, momentum=a.momentum, weight_decay=a.weight_decay)  # noqa: E731
    r = Recipe(net, sgd, level, low, dev)
    steps_per_epoch = xtr.shape[0] // a.batch  # drop_last, as mpx train's loader
    if steps_per_epoch == 0:
        raise ValueError(f"{xtr.shape[0]} training images are fewer than one batch of {a.batch}; raise --limit-train")
    total = steps_per_epoch * a.epochs
    gen = torch.Generator().manual_seed(a.seed)
    step, best, t_train = 0, -1.0, 0.0
    t0 = time.perf_counter()
    for epoch in range(a.epochs):
        order = torch.randperm(xtr.shape[0], generator=gen)
        loss_sum, seen = 0.0, 0
        te0 = time.perf_counter()
        for b in range(steps_per_epoch):
            idx = order[b * a.batch:(b + 1) * a.batch]
            xb, yb = xtr[idx].to(dev), ytr[idx].to(dev)
            for g in r.opt.param_groups:
                g["lr"] = cosine_lr(base_lr, step, total)
            r.zero_grad()
            loss = F.cross_entropy(r.forward(xb), yb)
            r.backward(loss)
            r.step()
            lv = loss.item()
            if not math.isfinite(lv) and r.scaler is None:
                raise FloatingPointError(f"the loss became {lv} at step {step + 1} (no dynamic loss scale to skip it)")
            loss_sum += lv * yb.shape[0]
            seen += yb.shape[0]
            step += 1
        t_train += time.perf_counter() - te0
        test_loss, top1 = evaluate(r, xte, yte, a.batch)
        best = max(best, top1)
        print(f"  {model} {level} {dname} epoch {epoch + 1}/{a.epochs}: train loss {loss_sum / seen:.4f} | "
              f"test loss {test_loss:.4f} top-1 {top1:.2f}% | {seen / (time.perf_counter() - te0):.0f} img/s", flush=True)
    ips = steps_per_epoch * a.batch * a.epochs / max(1e-9, t_train)
    return nparams, top1, best, loss_sum / seen, test_loss, time.perf_counter() - t0, ips


def gpt_accuracy_main(a, dev, rows, Recipe):
    """GPT presets: each level replays mpx gpt's run from the file mpx bench wrote (same weights and windows)."""
    for m, level, d in rows:
        low = {"f16": torch.float16, "bf16": torch.bfloat16, "f32": torch.float32}[d]
        try:
            nparams, train_loss, val, wall, tps = gpt_accuracy_row(m, level, low, a, dev, Recipe)
            status = "ok"
        except Exception as e:  # noqa: BLE001 - a level PyTorch cannot run is reported, not fatal
            nparams, train_loss, val, wall, tps = 0, float("nan"), float("nan"), float("nan"), float("nan")
            msg = str(e).splitlines()[0] if str(e) else type(e).__name__
            kind = "diverged: " if isinstance(e, FloatingPointError) else "unsupported: "
            status = kind + msg.replace(",", ";")[:80]
        print(f"{m:9} {level} {d:4} validation loss {val:.4f} train loss {train_loss:.4f} {tps:.0f} tokens/s {status}")
        print(f"acc,{m},{level},{d},{nparams},nan,nan,{train_loss},{val},{wall},{tps},{status}", flush=True)


def accuracy_main(a, dev, rows, Recipe, classifier):
    """peer_bench.py --accuracy: `rows` of (model, level, dtype); Recipe and classifier are peer_bench.py's."""
    if all(m in LM_MODELS for m, _, _ in rows):
        gpt_accuracy_main(a, dev, rows, Recipe)
        return
    if a.dataset not in IDX_SETS:
        raise SystemExit(f"peer_bench.py --accuracy: --dataset {a.dataset} is not supported by the peer (it reads "
                         f"{', '.join(IDX_SETS)} IDX files); drop --peer or use one of those")
    root, mean, std = IDX_SETS[a.dataset]
    root = a.data or root
    data = (load_split(root, True, mean, std, a.limit_train), load_split(root, False, mean, std, a.limit_test))
    print(f"peer accuracy: {a.dataset} from {root} ({data[0][0].shape[0]} train / {data[1][0].shape[0]} test images), "
          f"batch {a.batch}, lr {a.lr * a.batch / 256:g} ({a.lr:g} x {a.batch}/256, cosine), momentum {a.momentum:g}, "
          f"weight decay {a.weight_decay:g}, {a.epochs} epoch(s), seed {a.seed}", flush=True)
    counted = set()
    for m, level, d in rows:
        try:
            res = train_row(m, level, d, a, dev, data, Recipe, classifier)
            status = "ok"
        except Exception as e:  # noqa: BLE001 - a level PyTorch cannot run is reported, not fatal
            res = (0,) + (float("nan"),) * 6
            msg = str(e).splitlines()[0] if str(e) else type(e).__name__
            kind = "diverged: " if isinstance(e, FloatingPointError) else "unsupported: "
            status = kind + msg.replace(",", ";")[:80]
        nparams = res[0]
        if nparams and m not in counted:
            counted.add(m)
            print(f"params {m}: {nparams:,}")
        print(f"{m:9} {level} {d:4} final top-1 {res[1]:.2f}% best {res[2]:.2f}% test loss {res[4]:.4f} {status}")
        print("acc," + ",".join(str(v) for v in (m, level, d) + tuple(res)) + "," + status, flush=True)
