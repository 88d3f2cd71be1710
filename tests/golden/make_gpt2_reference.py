# Makes tests/golden/gpt2_tiny (a tiny transformers GPT-2 and its logits); checks that transformers loads a GPT-2 mpx wrote.
#
# Needs torch, transformers and safetensors; downloads nothing.
#
#   python tests/golden/make_gpt2_reference.py
#       regenerates tests/golden/gpt2_tiny/{config.json, model.safetensors, reference.safetensors}
#       (deterministic: torch.manual_seed(0)).
#
#   MPX_GPT2_EXPORT=gpt2_export.safetensors <build>/tests/test_gpt_hf "[gpt_hf]"
#   python tests/golden/make_gpt2_reference.py --check gpt2_export.safetensors
#       the C++ test loads gpt2_tiny into mpx and writes it back with save_hf_gpt2; --check
#       loads that file with GPT2LMHeadModel.from_pretrained (next to gpt2_tiny's config.json),
#       fails on any missing, unexpected or mismatched key or logged warning, and compares the
#       logits with the stored reference.

import argparse
import logging
import os
import shutil
import sys
import tempfile

import torch
import transformers
from safetensors.torch import load_file, save_file
from transformers import GPT2Config, GPT2LMHeadModel

HERE = os.path.dirname(os.path.abspath(__file__))
OUT_DIR = os.path.join(HERE, "gpt2_tiny")


def make_config():
    return GPT2Config(vocab_size=50, n_positions=16, n_embd=32, n_layer=2, n_head=4,
                      activation_function="gelu_new", resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0,
                      bos_token_id=None, eos_token_id=None)


def logits_of(model, ids):
    model.eval()
    with torch.no_grad():
        return model(input_ids=ids).logits.contiguous()


def generate():
    torch.manual_seed(0)
    model = GPT2LMHeadModel(make_config())
    # GPT-2's init leaves biases at 0 and LayerNorms at 1, which would hide a wrong mapping of
    # those tensors; redraw everything so every tensor and every transpose shows in the logits.
    with torch.no_grad():
        for name, p in model.named_parameters():
            if ".ln_" in name or name.startswith("transformer.ln_f"):
                p.copy_((1.0 if name.endswith("weight") else 0.0) + 0.1 * torch.randn_like(p))
            elif name.endswith("bias"):
                p.copy_(0.1 * torch.randn_like(p))
            else:
                p.normal_(0.0, 0.2)
    ids = torch.randint(0, 50, (2, 16), dtype=torch.int64)
    logits = logits_of(model, ids)

    os.makedirs(OUT_DIR, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        model.save_pretrained(tmp)
        for f in ("config.json", "model.safetensors"):
            shutil.copyfile(os.path.join(tmp, f), os.path.join(OUT_DIR, f))
    save_file({"input_ids": ids, "logits": logits}, os.path.join(OUT_DIR, "reference.safetensors"),
              metadata={"generator": "tests/golden/make_gpt2_reference.py", "torch": torch.__version__,
                        "transformers": transformers.__version__})
    print(f"wrote {OUT_DIR} (torch {torch.__version__}, transformers {transformers.__version__})")


class _Collect(logging.Handler):
    def __init__(self):
        super().__init__(logging.WARNING)
        self.records = []

    def emit(self, record):
        self.records.append(record.getMessage())


def check(path):
    ref = load_file(os.path.join(OUT_DIR, "reference.safetensors"))
    handler = _Collect()
    logging.getLogger("transformers").addHandler(handler)
    with tempfile.TemporaryDirectory() as tmp:
        shutil.copy(os.path.join(OUT_DIR, "config.json"), tmp)
        shutil.copy(path, os.path.join(tmp, "model.safetensors"))
        model, info = GPT2LMHeadModel.from_pretrained(tmp, output_loading_info=True)
    logging.getLogger("transformers").removeHandler(handler)
    problems = {k: v for k, v in info.items() if v}
    if problems or handler.records:
        print("transformers did not load it cleanly:", problems, handler.records)
        return 1
    if model.lm_head.weight.data_ptr() != model.transformer.wte.weight.data_ptr():
        print("lm_head is not tied to wte after loading")
        return 1
    diff = (logits_of(model, ref["input_ids"]) - ref["logits"]).abs().max().item()
    print(f"transformers loaded {path} without warnings; max |logits - reference| = {diff:.3g}")
    return 0 if diff < 1e-4 else 1


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--check", metavar="MODEL_SAFETENSORS", help="load an mpx-written GPT-2 with transformers")
    args = ap.parse_args()
    if args.check:
        sys.exit(check(args.check))
    generate()
