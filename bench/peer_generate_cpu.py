#!/usr/bin/env python3
"""Hugging Face peer of bench/bench_generate_cpu: a GPT2LMHeadModel built from its config (no download), its
weights written with --write for mpx to load, then the same prompt of ids and greedy generation with the
key/value cache (transformers' generate); prints one JSON line like the mpx program."""
import argparse, json, os, time

import torch
from transformers import GPT2Config, GPT2LMHeadModel

PRESETS = {"gpt2": (12, 12, 768, 1024), "gpt-mini": (6, 6, 384, 256), "gpt-tiny": (4, 4, 128, 128)}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--weights", required=True, help="model.safetensors (written with --write, else read)")
    ap.add_argument("--model", default="gpt2", choices=sorted(PRESETS))
    ap.add_argument("--vocab", type=int, default=50257)
    ap.add_argument("--prompt", type=int, default=64)
    ap.add_argument("--new", type=int, default=64)
    ap.add_argument("--dtype", choices=["f32", "bf16"], default="f32")
    ap.add_argument("--write", action="store_true", help="initialise with seed 0 and write the weights first")
    a = ap.parse_args()
    L, H, C, T = PRESETS[a.model]
    cfg = GPT2Config(vocab_size=a.vocab, n_positions=T, n_embd=C, n_layer=L, n_head=H, activation_function="gelu_new")
    torch.manual_seed(0)
    model = GPT2LMHeadModel(cfg)
    if a.write:
        from safetensors.torch import save_file
        save_file({k: v.contiguous() for k, v in model.state_dict().items() if k != "lm_head.weight"}, a.weights,
                  metadata={"format": "pt"})
    else:
        from safetensors.torch import load_file
        model.load_state_dict(load_file(a.weights), strict=False)
        model.tie_weights()
    model.eval()
    ids = torch.tensor([[(i * 7919 + 13) % a.vocab for i in range(a.prompt)]])
    kw = dict(do_sample=False, use_cache=True, pad_token_id=0, attention_mask=torch.ones_like(ids))

    def run(n):
        with torch.no_grad(), torch.autocast("cpu", torch.bfloat16, enabled=a.dtype == "bf16"):
            t0 = time.perf_counter()
            out = model.generate(ids, max_new_tokens=n, min_new_tokens=n, **kw)
            return out, time.perf_counter() - t0

    run(2)  # warm up
    _, first = run(1)
    out, total = run(a.new)
    print(json.dumps({"framework": "transformers", "torch": torch.__version__, "model": a.model, "dtype": a.dtype,
                      "threads": torch.get_num_threads(), "prompt": a.prompt, "new": a.new,
                      "first_token_s": round(first, 4), "tokens_per_s": round((a.new - 1) / (total - first), 2),
                      "ids": out[0, a.prompt:].tolist()}))


if __name__ == "__main__":
    main()
