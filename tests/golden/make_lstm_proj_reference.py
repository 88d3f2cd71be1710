# Makes tests/golden/lstm_proj: torch.nn.LSTM with proj_size (seed 0), its inputs, outputs and gradients, for test_rnn_proj.
#
# Needs torch and safetensors; downloads nothing.
#
#   python tests/golden/make_lstm_proj_reference.py
#       writes tests/golden/lstm_proj/{uni,bi_batch_first}.safetensors: the model's state dict under PyTorch's names
#       (weight_hr_l0 ...), and under "ref." the input, the initial states, the output, h_n, c_n, the gradients of
#       sum(out * g_out) + sum(h_n) + sum(c_n) for the input and every parameter, and the packed run's output.

import os

import torch
from safetensors.torch import save_file

HERE = os.path.dirname(os.path.abspath(__file__))


def make(name, bidirectional, batch_first):
    torch.manual_seed(0)
    T, N, I, H, P, L = 5, 3, 4, 6, 3, 2
    D = 2 if bidirectional else 1
    model = torch.nn.LSTM(I, H, num_layers=L, proj_size=P, bidirectional=bidirectional, batch_first=batch_first)
    model = model.double()
    x = torch.randn(N, T, I, dtype=torch.float64) if batch_first else torch.randn(T, N, I, dtype=torch.float64)
    h0, c0 = torch.randn(L * D, N, P, dtype=torch.float64), torch.randn(L * D, N, H, dtype=torch.float64)
    x.requires_grad_(True)
    out, (hn, cn) = model(x, (h0, c0))
    g_out = torch.randn_like(out)
    ((out * g_out).sum() + hn.sum() + cn.sum()).backward()
    tensors = {k: v.detach().contiguous() for k, v in model.state_dict().items()}
    tensors.update({"ref.x": x.detach(), "ref.h0": h0, "ref.c0": c0, "ref.out": out.detach(), "ref.hn": hn.detach(),
                    "ref.cn": cn.detach(), "ref.g_out": g_out, "ref.grad.x": x.grad})
    for k, p in model.named_parameters():
        tensors["ref.grad." + k] = p.grad.contiguous()
    # Packed: sequence n keeps lengths[n] steps (unsorted, so the module sorts and restores the order).
    lengths = torch.tensor([3, 5, 2])
    packed = torch.nn.utils.rnn.pack_padded_sequence(x.detach(), lengths, batch_first=batch_first, enforce_sorted=False)
    pout, (phn, pcn) = model(packed, (h0, c0))
    padded, _ = torch.nn.utils.rnn.pad_packed_sequence(pout, batch_first=batch_first)
    tensors.update({"ref.lengths": lengths, "ref.packed_out": padded.detach(), "ref.packed_hn": phn.detach(),
                    "ref.packed_cn": pcn.detach()})
    tensors = {k: v.contiguous() for k, v in tensors.items()}
    os.makedirs(os.path.join(HERE, "lstm_proj"), exist_ok=True)
    save_file(tensors, os.path.join(HERE, "lstm_proj", name + ".safetensors"), metadata={"torch": torch.__version__})


make("uni", False, False)
make("bi_batch_first", True, True)
