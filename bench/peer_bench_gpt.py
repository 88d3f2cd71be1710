# Language-model rows of bench/peer_bench.py: PyTorch twins of mpx's models::GPT and models::LSTMLM started from mpx
# bench's weights and batch.
#
# mpx bench --peer writes GPT_DIR/MODEL_init.safetensors (the initial f32 weights under mpx's
# parameter names, and the token batch as "bench.tokens"); build_gpt loads it strictly.
import json
import math
import os
import struct
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


def causal_attention(q, k, v):
    """PyTorch's fused attention where it has one (2.0 on); the same math written out before."""
    if hasattr(F, "scaled_dot_product_attention"):
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)
    T = q.shape[-2]
    s = (q @ k.transpose(-2, -1)) * (q.shape[-1] ** -0.5)
    s = s.masked_fill(torch.ones(T, T, dtype=torch.bool, device=q.device).triu(1), float("-inf"))
    return torch.softmax(s.float(), dim=-1).to(q.dtype) @ v


class GPTBlock(nn.Module):
    """mpx's models::GPTBlock with Hugging Face's parameter names (h.0.attn.c_attn.weight, ...)."""

    def __init__(self, C, H):
        super().__init__()
        self.H = H
        self.ln_1 = nn.LayerNorm(C)
        self.attn = nn.Module()
        self.attn.c_attn = nn.Linear(C, 3 * C)
        self.attn.c_proj = nn.Linear(C, C)
        self.ln_2 = nn.LayerNorm(C)
        self.mlp = nn.Module()
        self.mlp.c_fc = nn.Linear(C, 4 * C)
        self.mlp.c_proj = nn.Linear(4 * C, C)

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.attn.c_attn(self.ln_1(x)).split(C, dim=2)
        q, k, v = (t.view(B, T, self.H, C // self.H).transpose(1, 2) for t in (q, k, v))
        y = causal_attention(q, k, v)
        x = x + self.attn.c_proj(y.transpose(1, 2).reshape(B, T, C))
        return x + self.mlp.c_proj(F.gelu(self.mlp.c_fc(self.ln_2(x)), approximate="tanh"))


class GPT(nn.Module):
    """mpx's models::GPT: embeddings, blocks, final LayerNorm, output projection tied to wte."""

    def __init__(self, V, L, H, C, T):
        super().__init__()
        self.wte = nn.Embedding(V, C)
        self.wpe = nn.Embedding(T, C)
        self.h = nn.ModuleList(GPTBlock(C, H) for _ in range(L))
        self.ln_f = nn.LayerNorm(C)

    def forward(self, idx):
        x = self.wte(idx) + self.wpe(torch.arange(idx.shape[1], device=idx.device))
        for b in self.h:
            x = b(x)
        return F.linear(self.ln_f(x), self.wte.weight)


class LSTMLM(nn.Module):
    """mpx's models::LSTMLM: embedding, a batch-first nn.LSTM, output projection tied to wte (no dropout)."""

    def __init__(self, V, C, L):
        super().__init__()
        self.wte = nn.Embedding(V, C)
        self.lstm = nn.LSTM(C, C, num_layers=L, batch_first=True)
        self.lm_head = nn.Linear(C, V)
        self.lm_head.weight = self.wte.weight

    def forward(self, idx):
        return self.lm_head(self.lstm(self.wte(idx))[0])


# models::GPTConfig::preset's shapes: layers, heads, width, context (the vocabulary comes from the weights).
GPT_PRESETS = {"gpt2": (12, 12, 768, 1024), "gpt2-medium": (24, 16, 1024, 1024), "gpt2-large": (36, 20, 1280, 1024),
               "gpt2-xl": (48, 25, 1600, 1024), "gpt-tiny": (4, 4, 128, 128), "gpt-mini": (6, 6, 384, 256)}
# Every language model mpx bench has a row for: the GPT presets and models::LSTMLMConfig's defaults (width, layers).
LM_MODELS = dict(GPT_PRESETS, **{"lstm-lm": (256, 2)})


def language_model(model, state, T):
    """The twin of `model` with mpx's initial weights (`state`, mpx's parameter names) loaded strictly; mpx lists
    the LSTM model's tied projection once, as wte.weight."""
    V = state["wte.weight"].shape[0]
    if model == "lstm-lm":
        C, L = LM_MODELS[model]
        net = LSTMLM(V, C, L)
        state = dict(state, **{"lm_head.weight": state["wte.weight"]})
    else:
        L, H, C, _ = GPT_PRESETS[model]
        net = GPT(V, L, H, C, T)
    net.load_state_dict(state, strict=True)
    return net


def read_safetensors(path, meta=None):
    """The tensors of a safetensors file (what mpx's save_tensors writes), without the safetensors package;
    its metadata strings go into `meta` when given a dict."""
    dtypes = {"F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16, "I64": torch.int64, "I32": torch.int32}
    with open(path, "rb") as f:
        raw = f.read()
    n = struct.unpack("<Q", raw[:8])[0]
    body = memoryview(raw)[8 + n:]
    out = {}
    for name, e in json.loads(raw[8:8 + n]).items():
        if name == "__metadata__":
            if meta is not None:
                meta.update(e)
            continue
        a, b = e["data_offsets"]
        dt = dtypes[e["dtype"]]
        t = torch.frombuffer(bytearray(body[a:b]), dtype=dt) if b > a else torch.empty(0, dtype=dt)
        out[name] = t.reshape(e["shape"])
    return out


def build_gpt(model, level, low, a, dev, recipe, tensor_bytes):
    """A GPT row of peer_bench.py's run_row under `recipe` (its Recipe class): mpx's initial weights
    and batch, AdamW as mpx gpt (decay on matrices and embeddings only), cross-entropy in f32.
    Returns (step, parameter count, bytes living between steps, sequences per step)."""
    path = os.path.join(a.gpt_dir, f"{model}_init.safetensors")
    if not os.path.exists(path):
        raise FileNotFoundError(f"{path} is missing; mpx bench --peer writes it (pass --gpt-dir as its --out)")
    state = read_safetensors(path)
    tokens = state.pop("bench.tokens")
    net = language_model(model, state, tokens.shape[1] - 1)
    nparams = sum(p.numel() for p in net.parameters())

    def adamw(ps):
        groups = [{"params": [p for p in ps if p.dim() >= 2], "weight_decay": 0.1},
                  {"params": [p for p in ps if p.dim() < 2], "weight_decay": 0.0}]
        return torch.optim.AdamW(groups, lr=1e-3, betas=(0.9, 0.95), eps=1e-8)

    r = recipe(net, adamw, level, low, dev, a.compile)
    x, y = tokens[:, :-1].contiguous().to(dev), tokens[:, 1:].reshape(-1).to(dev)

    def step():
        r.zero_grad()
        logits = r.forward(x)
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y)
        r.backward(loss)
        r.step()
        return loss

    return step, nparams, lambda: r.live_bytes() + tensor_bytes(x, y), tokens.shape[0]


def gpt_lr_at(step, lr, min_lr, warmup, steps):
    """tools/gpt_parts.cpp's gpt_lr_at: linear warmup, then a cosine to min_lr at `steps`."""
    if step < warmup:
        return lr * (step + 1) / warmup
    if step >= steps:
        return min_lr
    t = (step - warmup) / max(1, steps - warmup)
    return min_lr + 0.5 * (1.0 + math.cos(math.pi * t)) * (lr - min_lr)


def gpt_accuracy_row(model, level, low, a, dev, recipe):
    """One level of `mpx bench --accuracy` for a GPT preset: mpx gpt's run replayed from
    MODEL_accuracy.safetensors (the initial weights, every step's windows, the validation windows,
    the hyper-parameters). Returns (params, train loss of the last 10 steps, final validation loss,
    wall seconds, training tokens/s)."""
    path = os.path.join(a.gpt_dir, f"{model}_accuracy.safetensors")
    if not os.path.exists(path):
        raise FileNotFoundError(f"{path} is missing; mpx bench --accuracy --peer writes it (pass --gpt-dir as its --out)")
    meta = {}
    state = read_safetensors(path, meta)
    data = {k: state.pop(k).long() for k in ("train.x", "train.y", "val.x", "val.y")}
    net = language_model(model, state, data["train.x"].shape[-1])
    nparams = sum(p.numel() for p in net.parameters())
    f = {k: float(v) for k, v in meta.items() if k != "mpx.bench.model"}
    steps, warmup, every = int(f["steps"]), int(f["warmup"]), int(f["eval_interval"])

    def adamw(ps):
        groups = [{"params": [p for p in ps if p.dim() >= 2], "weight_decay": f["weight_decay"]},
                  {"params": [p for p in ps if p.dim() < 2], "weight_decay": 0.0}]
        return torch.optim.AdamW(groups, lr=f["lr"], betas=(f["beta1"], f["beta2"]), eps=f["eps"])

    r = recipe(net, adamw, level, low, dev)

    def validate():
        r.net.eval()
        with torch.no_grad():
            losses = []
            for x, y in zip(data["val.x"], data["val.y"]):
                logits = r.forward(x.to(dev))
                losses.append(F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1).to(dev)).item())
        r.net.train()
        return sum(losses) / len(losses)

    recent, val, t_train = [], float("nan"), 0.0
    t0 = time.perf_counter()
    for step in range(steps):
        ts = time.perf_counter()
        for g in r.opt.param_groups:
            g["lr"] = gpt_lr_at(step, f["lr"], f["min_lr"], warmup, steps)
        x, y = data["train.x"][step].to(dev), data["train.y"][step].reshape(-1).to(dev)
        r.zero_grad()
        logits = r.forward(x)
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y)
        r.backward(loss)
        r.step(clip=f["clip"])
        lv = loss.item()
        t_train += time.perf_counter() - ts
        if not math.isfinite(lv) and r.scaler is None:
            raise FloatingPointError(f"the loss became {lv} at step {step + 1}")
        recent = (recent + [lv])[-10:]
        if (step + 1) % every == 0 or step + 1 == steps:
            val = validate()
            print(f"  {model} {level} {'f32' if level == 'O0' else str(low).split('.')[-1]} step {step + 1}/{steps}: "
                  f"train loss {sum(recent) / len(recent):.4f} | validation loss {val:.4f}", flush=True)
    tps = steps * data["train.x"].shape[1] * data["train.x"].shape[2] / max(1e-9, t_train)
    return nparams, sum(recent) / len(recent), val, time.perf_counter() - t0, tps
