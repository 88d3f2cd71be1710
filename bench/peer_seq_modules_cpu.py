#!/usr/bin/env python3
"""PyTorch peer of bench/bench_seq_modules_cpu: the same pre-norm TransformerEncoder and two-layer LSTM (lstmp: with
proj_size), GRU or RNN, initial
weights and inputs (DIR/MODEL.safetensors, written by the mpx program with --write); --packed runs the recurrent ones over
sequences of different lengths through pack_padded_sequence."""
import argparse, os, time

import torch
import torch.nn as nn
import torch.nn.functional as F
from safetensors.torch import load_file


class EncoderNet(nn.Module):
    def __init__(self, d, heads, layers):
        super().__init__()
        layer = nn.TransformerEncoderLayer(d, heads, dim_feedforward=4 * d, activation="gelu", batch_first=True,
                                           norm_first=True)
        self.enc = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.head = nn.Linear(d, d)

    def forward(self, x):
        return self.head(self.enc(x))


class RnnNet(nn.Module):
    def __init__(self, kind, d, hidden, proj=0):
        super().__init__()
        extra = {"proj_size": proj} if proj else {}
        setattr(self, kind, {"lstm": nn.LSTM, "gru": nn.GRU, "rnn": nn.RNN}[kind](d, hidden, num_layers=2, batch_first=True,
                                                                                 **extra))
        self.kind = kind
        self.head = nn.Linear(proj or hidden, d)

    def forward(self, x):
        return self.head(getattr(self, self.kind)(x)[0])

    def forward_packed(self, x, lengths):
        p = nn.utils.rnn.pack_padded_sequence(x, lengths, batch_first=True, enforce_sorted=False)
        out = getattr(self, self.kind)(p)[0]
        return self.head(nn.utils.rnn.pad_packed_sequence(out, batch_first=True, total_length=x.size(1))[0])


ap = argparse.ArgumentParser()
ap.add_argument("--model", choices=["encoder", "lstm", "lstmp", "gru", "rnn"], default="encoder")
ap.add_argument("--dtype", choices=["f32", "bf16"], default="f32")
ap.add_argument("--steps", type=int, default=12)
ap.add_argument("--dir", default="out/bench_seq")
ap.add_argument("--packed", action="store_true")
a = ap.parse_args()
state = load_file(os.path.join(a.dir, a.model + ".safetensors"))
x, target, lengths = state.pop("bench.x"), state.pop("bench.target"), state.pop("bench.lengths")
if a.model == "encoder":
    net = EncoderNet(256, 4, 4)
elif a.model == "lstmp":
    net = RnnNet("lstm", 256, 512, proj=256)
else:
    net = RnnNet(a.model, 256, 512)
net.load_state_dict(state, strict=True)
opt = torch.optim.AdamW(net.parameters(), lr=1e-3)
times, first, last = [], 0.0, 0.0
for s in range(a.steps):
    t0 = time.perf_counter()
    opt.zero_grad()
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=a.dtype == "bf16"):
        y = net.forward_packed(x, lengths) if a.packed else net(x)
        loss = F.mse_loss(y.float(), target)
    loss.backward()
    opt.step()
    last = loss.item()
    if s == 0:
        first = last
    if s >= 2:
        times.append((time.perf_counter() - t0) * 1e3)
times.sort()
print(f"torch {a.model:7s} {a.dtype:4s}{' packed' if a.packed else ''} step {times[len(times) // 2]:7.1f} ms (median of {len(times)}; min {times[0]:.1f})"
      f"  loss {first:.6f} -> {last:.6f}")
