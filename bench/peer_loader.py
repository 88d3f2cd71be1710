"""Input-pipeline throughput of torchvision's ImageFolder + DataLoader (the peer of bench/bench_loader.cpp).

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
except ImportError as e:  # pragma: no cover
    sys.exit(f"peer_loader.py: needs torch and torchvision ({e}); on Debian: apt-get install python3-torchvision")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", required=True)
    ap.add_argument("--workers", type=int, default=1)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--epochs", type=int, default=1)
    ap.add_argument("--transform", choices=["train", "eval"], default="train")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
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
    ips = images / seconds
    cores = max(1, a.workers)
    r = {"impl": "torchvision", "version": torchvision.__version__, "transform": a.transform, "workers": a.workers,
         "images": images, "seconds": round(seconds, 4), "images_per_s": round(ips, 2),
         "images_per_s_per_core": round(ips / cores, 2), "cpu_s": round(cpu, 4),
         "images_per_cpu_s": round(images / cpu, 2)}
    if a.json:
        print(json.dumps(r))
    else:
        print(f"torchvision {a.transform} workers={a.workers}: {images} images in {seconds:.2f} s: "
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
