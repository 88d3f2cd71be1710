# Makes tests/golden/transformer: a small torch.nn.Transformer and a MultiheadAttention (seed 0), its inputs and outputs, for test_attention_nn.
#
# Needs torch and safetensors; downloads nothing.
#
#   python tests/golden/make_transformer_reference.py
#       writes tests/golden/transformer/{post_norm_relu,pre_norm_gelu}.safetensors: the model's state dict under
#       PyTorch's names, and under "ref." the inputs (src, tgt, masks) and the output, computed with gradients enabled
#       (eval mode without them takes PyTorch's fast path, which zeroes the padded positions of the encoder's output),
#       and mha_bias_kv_zero_attn.safetensors: a MultiheadAttention with add_bias_kv, add_zero_attn, kdim and vdim.

import os

import torch
from safetensors.torch import save_file

HERE = os.path.dirname(os.path.abspath(__file__))


def make(name, norm_first, activation):
    torch.manual_seed(0)
    model = torch.nn.Transformer(d_model=16, nhead=2, num_encoder_layers=2, num_decoder_layers=2, dim_feedforward=32,
                                 dropout=0.0, activation=activation, batch_first=True, norm_first=norm_first)
    model.eval()
    src, tgt = torch.randn(2, 5, 16), torch.randn(2, 4, 16)
    tgt_mask = torch.nn.Transformer.generate_square_subsequent_mask(4)
    src_key_padding_mask = torch.tensor([[False, False, False, False, False], [False, False, False, True, True]])
    out = model(src, tgt, tgt_mask=tgt_mask, src_key_padding_mask=src_key_padding_mask,
                memory_key_padding_mask=src_key_padding_mask)
    tensors = {k: v.detach().contiguous() for k, v in model.state_dict().items()}
    tensors.update({"ref.src": src, "ref.tgt": tgt, "ref.tgt_mask": tgt_mask,
                    "ref.src_key_padding_mask": src_key_padding_mask, "ref.out": out.detach()})
    os.makedirs(os.path.join(HERE, "transformer"), exist_ok=True)
    save_file(tensors, os.path.join(HERE, "transformer", name + ".safetensors"), metadata={"torch": torch.__version__})


def make_mha():
    # MultiheadAttention with add_bias_kv, add_zero_attn and different kdim/vdim, masks of both kinds, weights.
    torch.manual_seed(0)
    mha = torch.nn.MultiheadAttention(8, 2, add_bias_kv=True, add_zero_attn=True, kdim=6, vdim=5, batch_first=True)
    q, k, v = torch.randn(2, 3, 8), torch.randn(2, 4, 6), torch.randn(2, 4, 5)
    attn_mask = torch.tensor([[False, True, False, False], [False, False, True, False], [False, False, False, False]])
    key_padding_mask = torch.tensor([[False, False, False, False], [False, False, True, True]])
    out, weights = mha(q, k, v, key_padding_mask=key_padding_mask, attn_mask=attn_mask, need_weights=True,
                       average_attn_weights=False)
    out_nw, _ = mha(q, k, v, key_padding_mask=key_padding_mask, need_weights=False)
    tensors = {k_: v_.detach().contiguous() for k_, v_ in mha.state_dict().items()}
    tensors.update({"ref.q": q, "ref.k": k, "ref.v": v, "ref.attn_mask": attn_mask,
                    "ref.key_padding_mask": key_padding_mask, "ref.out": out.detach(), "ref.weights": weights.detach(),
                    "ref.out_no_weights": out_nw.detach()})
    tensors = {k_: v_.contiguous() for k_, v_ in tensors.items()}
    save_file(tensors, os.path.join(HERE, "transformer", "mha_bias_kv_zero_attn.safetensors"),
              metadata={"torch": torch.__version__})


make("post_norm_relu", False, "relu")
make("pre_norm_gelu", True, "gelu")
make_mha()
