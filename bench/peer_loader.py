"""Input-pipeline throughput of torchvision's ImageFolder + DataLoader (the peer of bench/bench_loader.cpp).

Without torchvision (or with --pil) a PIL + NumPy peer does the same steps in a process pool.

The same transforms as mpx's ImagePipeline: train = RandomResizedCrop(224) + RandomHorizontalFlip +
ToTensor + Normalize, eval = Resize(256) + CenterCrop(224) + ToTensor + Normalize, on PIL images
(torchvision's default loader: full-size decode, then PIL's antialiased bilinear resize).
"""
import argparse
import json
import os
import sys
import time

try:
    import torch
    import torchvision
    from torchvision import datasets, transforms
except ImportError:  # the PIL-only peer below does torchvision's steps itself
    torch = None


def pil_peer(a):
    """torchvision's transform steps on PIL images without torchvision: full-size decode (no draft()),
    crop, PIL's antialiased BILINEAR resize, flip, to float, normalize; multiprocessing workers."""
    import multiprocessing as mp
    import random
    from PIL import Image

    classes = sorted(d for d in os.listdir(a.data) if os.path.isdir(os.path.join(a.data, d)))
    files = [(os.path.join(r, f), k) for k, c in enumerate(classes) for r, _, fs in sorted(os.walk(os.path.join(a.data, c)))
             for f in sorted(fs) if f.lower().endswith((".jpg", ".jpeg", ".png", ".bmp"))]
    order = list(range(len(files)))
    random.Random(0).shuffle(order)
    batches = [order[i:i + a.batch] for i in range(0, len(order), a.batch)]
    pool = mp.Pool(max(1, a.workers), initializer=_pil_init, initargs=(files, a.transform))
    for _ in pool.imap(_pil_batch, batches[:2]):  # untimed, as the torchvision peer
        pass
    images, cpu0, t0 = 0, _children_cpu(pool), time.perf_counter()
    for x in pool.imap(_pil_batch, batches):
        images += x.shape[0]
    seconds = time.perf_counter() - t0
    cpu = _children_cpu(pool) - cpu0 + time.process_time()
    pool.close()
    return images, seconds, cpu, "PIL " + Image.__version__


_FILES, _TRANSFORM = None, None


def _pil_init(files, transform):
    global _FILES, _TRANSFORM
    _FILES, _TRANSFORM = files, transform


def _pil_batch(idx):
    import math
    import random
    import numpy as np
    from PIL import Image
    mean = np.array([0.485, 0.456, 0.406], np.float32).reshape(3, 1, 1)
    std = np.array([0.229, 0.224, 0.225], np.float32).reshape(3, 1, 1)
    out = []
    for i in idx:
        img = Image.open(_FILES[i][0]).convert("RGB")
        W, H = img.size
        if _TRANSFORM == "train":
            box = None
            for _ in range(10):
                target = W * H * random.uniform(0.08, 1.0)
                ar = math.exp(random.uniform(math.log(3 / 4), math.log(4 / 3)))
                w, h = int(round(math.sqrt(target * ar))), int(round(math.sqrt(target / ar)))
                if 0 < w <= W and 0 < h <= H:
                    top, left = random.randint(0, H - h), random.randint(0, W - w)
                    box = (left, top, left + w, top + h)
                    break
            if box is None:
                r = W / H
                w, h = (W, int(round(W / (3 / 4)))) if r < 3 / 4 else (int(round(H * 4 / 3)), H) if r > 4 / 3 else (W, H)
                box = ((W - w) // 2, (H - h) // 2, (W - w) // 2 + w, (H - h) // 2 + h)
            img = img.crop(box).resize((224, 224), Image.BILINEAR)
            if random.random() < 0.5:
                img = img.transpose(Image.FLIP_LEFT_RIGHT)
        else:
            s, l = (W, H) if W <= H else (H, W)
            ns, nl = 256, int(256 * l / s)
            img = img.resize((ns, nl) if W <= H else (nl, ns), Image.BILINEAR)
            W, H = img.size
            top, left = int(round((H - 224) / 2)), int(round((W - 224) / 2))
            img = img.crop((left, top, left + 224, top + 224))
        x = np.asarray(img, dtype=np.float32).transpose(2, 0, 1) / 255.0
        out.append((x - mean) / std)
    return np.stack(out)


def _children_cpu(pool):
    return cpu_seconds([p.pid for p in pool._pool])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", required=True)
    ap.add_argument("--workers", type=int, default=1)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--epochs", type=int, default=1)
    ap.add_argument("--transform", choices=["train", "eval"], default="train")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--pil", action="store_true", help="the PIL-only peer even where torchvision is installed")
    a = ap.parse_args()
    if a.pil or torch is None:
        images, seconds, cpu, version = pil_peer(a)
        report(a, "pil-peer", version, images, seconds, cpu)
        return
    torch.set_num_threads(1)
    norm = transforms.Normalize([0.485, 0.456, 0.406], [0.229, 0.224, 0.225])
    if a.transform == "train":
        t = transforms.Compose([transforms.RandomResizedCrop(224), transforms.RandomHorizontalFlip(),
                                transforms.ToTensor(), norm])
    else:
        t = transforms.Compose([transforms.Resize(256), transforms.CenterCrop(224), transforms.ToTensor(), norm])
    ds = datasets.ImageFolder(a.data, t)
    loader = torch.utils.data.DataLoader(ds, batch_size=a.batch, shuffle=True, num_workers=a.workers,
                                         persistent_workers=a.workers > 0)
    # Untimed: worker start-up and the page cache, as bench_loader's first batches.
    for k, _ in enumerate(loader):
        if k == 2:
            break
    images, seconds, cpu = 0, 0.0, 0.0
    for _ in range(a.epochs):
        it = iter(loader)
        pids = [w.pid for w in getattr(it, "_workers", [])]
        c0 = cpu_seconds(pids) + time.process_time()
        t0 = time.perf_counter()
        for x, _ in it:
            images += x.shape[0]
        seconds += time.perf_counter() - t0
        cpu += cpu_seconds(pids) + time.process_time() - c0
    import PIL
    report(a, "torchvision", f"{torchvision.__version__} + PIL {PIL.__version__}", images, seconds, cpu)


def report(a, impl, version, images, seconds, cpu):
    ips = images / seconds
    cores = max(1, a.workers)
    r = {"impl": impl, "version": version, "transform": a.transform, "workers": a.workers,
         "images": images, "seconds": round(seconds, 4), "images_per_s": round(ips, 2),
         "images_per_s_per_core": round(ips / cores, 2), "cpu_s": round(cpu, 4),
         "images_per_cpu_s": round(images / cpu, 2)}
    if a.json:
        print(json.dumps(r))
    else:
        print(f"{impl} {a.transform} workers={a.workers}: {images} images in {seconds:.2f} s: "
              f"{ips:.1f} images/s, {ips / cores:.1f} per core, {images / cpu:.1f} per CPU-second")


def cpu_seconds(pids):
    """User + system CPU time of the worker processes, from /proc (they are alive: persistent workers)."""
    total = 0.0
    tick = os.sysconf("SC_CLK_TCK")
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            total += (int(fields[11]) + int(fields[12])) / tick
        except OSError:
            pass
    return total


if __name__ == "__main__":
    main()
