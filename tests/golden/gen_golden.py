# Generates the float64 torch reference values (safetensors files) that the mpx C++ tests compare against.
#
# Regenerate with:  /usr/bin/python3 tests/golden/gen_golden.py [FILE ...]
#
# The safetensors writer/reader is hand-rolled on purpose: the C++ side has its
# own reader, and this keeps the generator free of the `safetensors` package so
# both sides are checked against the format spec rather than one library.

import json
import os
import struct
import sys

import numpy as np
import torch
import torch.nn.functional as F

OUT_DIR = os.path.dirname(os.path.abspath(__file__))

# Everything in float64 so the C++ tests can use tight tolerances.
torch.set_default_dtype(torch.float64)

_DTYPES = {
    torch.float64: ("F64", "<f8"),
    torch.int64: ("I64", "<i8"),
}
_NP_FROM_CODE = {code: np_dt for code, np_dt in _DTYPES.values()}


# --------------------------------------------------------------------------
# safetensors I/O
# --------------------------------------------------------------------------

def write_safetensors(path, tensors, metadata=None):
    header = {}
    chunks = []
    offset = 0
    for name, t in tensors.items():
        t = t.detach()
        if t.dtype not in _DTYPES:
            raise TypeError(f"{name}: unsupported dtype {t.dtype}")
        code, np_dt = _DTYPES[t.dtype]
        # Explicit little-endian dtype so the bytes are correct regardless of host order.
        raw = np.ascontiguousarray(t.contiguous().numpy()).astype(np_dt, copy=False).tobytes(order="C")
        header[name] = {"dtype": code, "shape": list(t.shape), "data_offsets": [offset, offset + len(raw)]}
        chunks.append(raw)
        offset += len(raw)
    if metadata:
        # The spec only allows string -> string in __metadata__.
        header["__metadata__"] = {str(k): str(v) for k, v in metadata.items()}
    hdr = json.dumps(header, separators=(",", ":")).encode("utf-8")
    # Pad so the data buffer starts 8-byte aligned, which lets readers mmap and cast directly.
    hdr += b" " * ((-len(hdr)) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(hdr)))
        f.write(hdr)
        for c in chunks:
            f.write(c)


def read_safetensors(path):
    with open(path, "rb") as f:
        blob = f.read()
    (n,) = struct.unpack_from("<Q", blob, 0)
    assert n % 8 == 0, "header not padded to 8 bytes"
    header = json.loads(blob[8:8 + n].decode("utf-8"))
    data = blob[8 + n:]
    metadata = header.pop("__metadata__", {})
    out = {}
    spans = []
    for name, info in header.items():
        begin, end = info["data_offsets"]
        np_dt = np.dtype(_NP_FROM_CODE[info["dtype"]])
        shape = info["shape"]
        count = int(np.prod(shape)) if shape else 1
        assert end - begin == count * np_dt.itemsize, f"{name}: size mismatch"
        arr = np.frombuffer(data, dtype=np_dt, count=count, offset=begin).reshape(shape)
        out[name] = torch.from_numpy(arr.astype(np_dt.newbyteorder("="), copy=True))
        spans.append((begin, end))
    # The spec requires the buffer to be fully covered without holes or overlaps.
    spans.sort()
    pos = 0
    for b, e in spans:
        assert b == pos, f"hole/overlap at byte {pos}"
        pos = e
    assert pos == len(data), "trailing bytes after last tensor"
    return out, metadata


# --------------------------------------------------------------------------
# helpers
# --------------------------------------------------------------------------

def leaf(t):
    return t.detach().clone().requires_grad_(True)


def put_grads(store, prefix, y, named_inputs):
    """Backprop sum(y * gy) with a random gy and store gy plus each input's grad."""
    gy = torch.randn_like(y)
    (y * gy).sum().backward()
    store[f"{prefix}.gy"] = gy
    for name, t in named_inputs.items():
        store[f"{prefix}.{name}"] = t.grad.detach().clone()


# --------------------------------------------------------------------------
# conv.safetensors
# --------------------------------------------------------------------------

def gen_conv():
    torch.manual_seed(0)
    store, meta = {}, {}

    conv_cases = [
        # name, x shape, w shape, b shape, stride, padding, dilation, groups
        ("conv2d_a", [2, 4, 7, 6], [6, 4, 3, 3], [6], (2, 2), (1, 1), (1, 1), 1),
        ("conv2d_b", [2, 4, 9, 8], [6, 2, 3, 2], [6], (1, 2), (2, 1), (2, 1), 2),
    ]
    for name, xs, ws, bs, stride, padding, dilation, groups in conv_cases:
        x, w, b = leaf(torch.randn(xs)), leaf(torch.randn(ws)), leaf(torch.randn(bs))
        y = F.conv2d(x, w, b, stride=stride, padding=padding, dilation=dilation, groups=groups)
        store.update({f"{name}.x": x, f"{name}.w": w, f"{name}.b": b, f"{name}.y": y})
        put_grads(store, name, y, {"gx": x, "gw": w, "gb": b})
        meta[name] = json.dumps({"op": "conv2d", "stride": stride, "padding": padding,
                                 "dilation": dilation, "groups": groups})

    convt_cases = [
        # name, x shape, w shape (in, out/groups, kh, kw), b shape, stride, padding, output_padding, groups, dilation
        ("conv_t_a", [2, 4, 5, 5], [4, 3, 3, 3], [3], (2, 2), (1, 1), (1, 1), 1, (1, 1)),
        ("conv_t_b", [1, 4, 4, 3], [4, 2, 3, 3], [4], (2, 2), (0, 0), (0, 0), 2, (1, 1)),
    ]
    for name, xs, ws, bs, stride, padding, out_pad, groups, dilation in convt_cases:
        x, w, b = leaf(torch.randn(xs)), leaf(torch.randn(ws)), leaf(torch.randn(bs))
        y = F.conv_transpose2d(x, w, b, stride=stride, padding=padding, output_padding=out_pad,
                               groups=groups, dilation=dilation)
        store.update({f"{name}.x": x, f"{name}.w": w, f"{name}.b": b, f"{name}.y": y})
        put_grads(store, name, y, {"gx": x, "gw": w, "gb": b})
        meta[name] = json.dumps({"op": "conv_transpose2d", "stride": stride, "padding": padding,
                                 "output_padding": out_pad, "dilation": dilation, "groups": groups})
    return store, meta


# --------------------------------------------------------------------------
# norm_pool.safetensors
# --------------------------------------------------------------------------

def gen_norm_pool():
    torch.manual_seed(0)
    store, meta = {}, {}

    # Batch norm, training mode. Non-zero mean / non-unit std so normalisation actually matters.
    p = "bn_train"
    x = leaf(torch.randn(4, 3, 5, 5) * 2 + 1)
    weight = leaf(torch.rand(3) + 0.5)
    bias = leaf(torch.randn(3))
    rm, rv = torch.zeros(3), torch.ones(3)
    y = F.batch_norm(x, rm, rv, weight, bias, training=True, momentum=0.1, eps=1e-5)
    store.update({f"{p}.x": x, f"{p}.weight": weight, f"{p}.bias": bias, f"{p}.y": y})
    put_grads(store, p, y, {"gx": x, "gweight": weight, "gbias": bias})
    # batch_norm updated rm/rv in place; torch uses the unbiased (n-1) variance here.
    store[f"{p}.running_mean"] = rm.clone()
    store[f"{p}.running_var"] = rv.clone()
    meta[p] = json.dumps({"op": "batch_norm", "training": True, "momentum": 0.1, "eps": 1e-5,
                          "running_mean_init": "zeros", "running_var_init": "ones",
                          "running_var_update": "unbiased"})

    # Batch norm, eval mode: uses the stored running statistics only.
    p = "bn_eval"
    x = leaf(torch.randn(4, 3, 5, 5) * 2 + 1)
    weight = leaf(torch.rand(3) + 0.5)
    bias = leaf(torch.randn(3))
    rm = torch.randn(3)
    rv = torch.rand(3) + 0.5
    y = F.batch_norm(x, rm, rv, weight, bias, training=False, momentum=0.1, eps=1e-5)
    store.update({f"{p}.x": x, f"{p}.weight": weight, f"{p}.bias": bias,
                  f"{p}.running_mean": rm.clone(), f"{p}.running_var": rv.clone(), f"{p}.y": y})
    put_grads(store, p, y, {"gx": x, "gweight": weight, "gbias": bias})
    meta[p] = json.dumps({"op": "batch_norm", "training": False, "eps": 1e-5})

    # Max pool: distinct values, so the argmax (and hence gx) is unambiguous.
    p = "maxpool"
    n = 2 * 3 * 7 * 7
    x = leaf(((torch.randperm(n).to(torch.float64) - n / 2) / 37.0).reshape(2, 3, 7, 7))
    y = F.max_pool2d(x, kernel_size=3, stride=2, padding=1)
    store.update({f"{p}.x": x, f"{p}.y": y})
    put_grads(store, p, y, {"gx": x})
    meta[p] = json.dumps({"op": "max_pool2d", "kernel": [3, 3], "stride": [2, 2], "padding": [1, 1]})

    p = "avgpool"
    x = leaf(torch.randn(2, 3, 7, 7))
    y = F.avg_pool2d(x, kernel_size=3, stride=2, padding=1, count_include_pad=True)
    store.update({f"{p}.x": x, f"{p}.y": y})
    put_grads(store, p, y, {"gx": x})
    meta[p] = json.dumps({"op": "avg_pool2d", "kernel": [3, 3], "stride": [2, 2], "padding": [1, 1],
                          "count_include_pad": True})

    # Non-divisible sizes (7->3, 5->2) so the overlapping-window index math is exercised.
    p = "adaptive"
    x = leaf(torch.randn(2, 3, 7, 5))
    y = F.adaptive_avg_pool2d(x, (3, 2))
    store.update({f"{p}.x": x, f"{p}.y": y})
    put_grads(store, p, y, {"gx": x})
    meta[p] = json.dumps({"op": "adaptive_avg_pool2d", "output_size": [3, 2]})
    return store, meta


# --------------------------------------------------------------------------
# loss.safetensors
# --------------------------------------------------------------------------

def gen_loss():
    torch.manual_seed(0)
    store, meta = {}, {}

    def ce_case(p, n, c, target, **kw):
        logits = leaf(torch.randn(n, c) * 2)
        loss = F.cross_entropy(logits, target, **kw)
        loss.backward()
        store.update({f"{p}.logits": logits, f"{p}.target": target, f"{p}.loss": loss,
                      f"{p}.glogits": logits.grad.clone()})
        meta[p] = json.dumps({"op": "cross_entropy", **kw})

    ce_case("ce_plain", 6, 5, torch.randint(0, 5, (6,)), reduction="mean")

    tgt = torch.randint(0, 5, (8,))
    # Two ignored rows: they must drop out of both the sum and the mean's denominator.
    tgt[2] = -100
    tgt[5] = -100
    ce_case("ce_smooth_ignore", 8, 5, tgt, reduction="mean", ignore_index=-100, label_smoothing=0.1)

    ce_case("ce_sum", 5, 4, torch.randint(0, 4, (5,)), reduction="sum")

    p = "bce"
    logits = leaf(torch.randn(7) * 2)
    # Soft targets strictly inside (0,1) so both log terms contribute.
    target = torch.rand(7) * 0.9 + 0.05
    loss = F.binary_cross_entropy_with_logits(logits, target, reduction="mean")
    loss.backward()
    store.update({f"{p}.logits": logits, f"{p}.target": target, f"{p}.loss": loss,
                  f"{p}.glogits": logits.grad.clone()})
    meta[p] = json.dumps({"op": "binary_cross_entropy_with_logits", "reduction": "mean"})
    return store, meta


# --------------------------------------------------------------------------
# optim.safetensors
# --------------------------------------------------------------------------

def gen_optim():
    torch.manual_seed(0)
    store, meta = {}, {}

    cases = [
        ("sgd", torch.optim.SGD,
         dict(lr=0.1, momentum=0.9, dampening=0.0, weight_decay=1e-4, nesterov=False)),
        ("sgd_nesterov", torch.optim.SGD,
         dict(lr=0.1, momentum=0.9, dampening=0.0, weight_decay=0.0, nesterov=True)),
        ("adamw", torch.optim.AdamW,
         dict(lr=1e-2, betas=(0.9, 0.999), eps=1e-8, weight_decay=1e-2)),
        # Adam's weight_decay is classic L2 (added to the gradient), unlike AdamW's decoupled decay.
        ("adam", torch.optim.Adam,
         dict(lr=1e-2, betas=(0.9, 0.999), eps=1e-8, weight_decay=1e-2)),
    ]
    for prefix, cls, kw in cases:
        p = torch.randn(5, 3, requires_grad=True)
        q = torch.randn(4, requires_grad=True)
        store[f"{prefix}.p0"] = p.detach().clone()
        store[f"{prefix}.q0"] = q.detach().clone()
        # Pin the non-default algorithm switches so a torch upgrade can't silently change the reference.
        extra = {"foreach": False}
        if cls is not torch.optim.SGD:
            extra.update(amsgrad=False, maximize=False)
        opt = cls([p, q], **kw, **extra)
        for step in (1, 2):
            gp, gq = torch.randn(5, 3), torch.randn(4)
            store[f"{prefix}.g{step}_p"] = gp
            store[f"{prefix}.g{step}_q"] = gq
            p.grad, q.grad = gp.clone(), gq.clone()
            opt.step()
        store[f"{prefix}.p2"] = p.detach().clone()
        store[f"{prefix}.q2"] = q.detach().clone()
        meta[prefix] = json.dumps({"optimizer": cls.__name__, "steps": 2, **kw})
    return store, meta


# --------------------------------------------------------------------------
# optim_more.safetensors: RMSprop and Adagrad, three steps
# --------------------------------------------------------------------------

def gen_optim_more():
    torch.manual_seed(1)
    store, meta = {}, {}
    cases = [
        ("rmsprop", torch.optim.RMSprop,
         dict(lr=1e-2, alpha=0.99, eps=1e-8, weight_decay=1e-2, momentum=0.0, centered=False)),
        ("rmsprop_centered", torch.optim.RMSprop,
         dict(lr=1e-2, alpha=0.9, eps=1e-6, weight_decay=0.0, momentum=0.0, centered=True)),
        ("rmsprop_momentum", torch.optim.RMSprop,
         dict(lr=1e-2, alpha=0.9, eps=1e-6, weight_decay=1e-3, momentum=0.9, centered=True)),
        ("adagrad", torch.optim.Adagrad,
         dict(lr=0.1, lr_decay=0.01, weight_decay=1e-2, initial_accumulator_value=0.1, eps=1e-10)),
    ]
    for prefix, cls, kw in cases:
        p = torch.randn(5, 3, requires_grad=True)
        q = torch.randn(4, requires_grad=True)
        store[f"{prefix}.p0"] = p.detach().clone()
        store[f"{prefix}.q0"] = q.detach().clone()
        opt = cls([p, q], **kw, foreach=False, maximize=False)
        for step in (1, 2, 3):
            gp, gq = torch.randn(5, 3), torch.randn(4)
            store[f"{prefix}.g{step}_p"] = gp
            store[f"{prefix}.g{step}_q"] = gq
            p.grad, q.grad = gp.clone(), gq.clone()
            opt.step()
        store[f"{prefix}.p3"] = p.detach().clone()
        store[f"{prefix}.q3"] = q.detach().clone()
        meta[prefix] = json.dumps({"optimizer": cls.__name__, "steps": 3, **kw})
    return store, meta


# --------------------------------------------------------------------------
# loss_more.safetensors: regression, likelihood, margin and embedding losses
# --------------------------------------------------------------------------

def gen_loss_more():
    torch.manual_seed(2)
    store, meta = {}, {}

    def case(name, fn, inputs, **kw):
        # inputs: name -> tensor; all but targets and weights get gradients of the mean loss.
        leaves = {k: (v.clone().requires_grad_(True) if k not in ("target", "weight") else v)
                  for k, v in inputs.items()}
        none = fn(**leaves, reduction="none", **kw)
        loss = fn(**leaves, reduction="mean", **kw)
        total = fn(**leaves, reduction="sum", **kw)
        loss.backward()
        for k, v in inputs.items():
            store[f"{name}.{k}"] = v.clone()
            if leaves[k].grad is not None:
                store[f"{name}.grad_{k}"] = leaves[k].grad.clone()
        store[f"{name}.none"] = none.detach().clone()
        store[f"{name}.mean"] = loss.detach().clone()
        store[f"{name}.sum"] = total.detach().clone()
        meta[name] = json.dumps({"op": fn.__name__, **kw})

    x, t = torch.randn(4, 5), torch.randn(4, 5) * 2
    case("huber", F.huber_loss, {"input": x, "target": t}, delta=0.7)
    rate = torch.rand(4, 5) * 3
    counts = torch.tensor([[0., 1., 2., 5., 3.]] * 4)
    case("poisson_log", F.poisson_nll_loss, {"input": torch.randn(4, 5), "target": counts}, log_input=True, full=True)
    case("poisson_rate", F.poisson_nll_loss, {"input": rate + 0.1, "target": counts}, log_input=False, full=False)
    var = torch.rand(4, 5) + 0.05
    var[0, 0] = 1e-9  # below eps: clamped in value only
    case("gaussian", F.gaussian_nll_loss, {"input": torch.randn(4, 5), "target": torch.randn(4, 5), "var": var},
         full=True, eps=1e-3)
    case("gaussian_row", F.gaussian_nll_loss, {"input": torch.randn(4, 5), "target": torch.randn(4, 5),
                                               "var": torch.rand(4) + 0.5})
    sign = torch.tensor([1., -1., 1., -1., -1.])
    case("soft_margin", F.soft_margin_loss, {"input": torch.randn(4, 5) * 3, "target": sign.expand(4, 5).clone()})
    y01 = (torch.rand(4, 5) > 0.5).double()
    case("multilabel_soft_margin", F.multilabel_soft_margin_loss,
         {"input": torch.randn(4, 5), "target": y01, "weight": torch.rand(5) + 0.5})
    cls = torch.tensor([0, 3, 4, 1])
    case("multi_margin", F.multi_margin_loss, {"input": torch.randn(4, 5), "target": cls}, p=1, margin=0.8)
    case("multi_margin_p2", F.multi_margin_loss,
         {"input": torch.randn(4, 5), "target": cls, "weight": torch.rand(5) + 0.5}, p=2, margin=1.2)
    case("margin_ranking", F.margin_ranking_loss,
         {"input1": torch.randn(6), "input2": torch.randn(6), "target": torch.tensor([1., -1., 1., 1., -1., -1.])},
         margin=0.3)
    case("hinge_embedding", F.hinge_embedding_loss,
         {"input": torch.randn(4, 5) * 2, "target": sign.expand(4, 5).clone()}, margin=1.5)
    case("cosine_embedding", F.cosine_embedding_loss,
         {"input1": torch.randn(6, 4), "input2": torch.randn(6, 4), "target": torch.tensor([1., -1., 1., -1., -1., 1.])},
         margin=0.2)
    case("triplet", F.triplet_margin_loss,
         {"anchor": torch.randn(5, 4), "positive": torch.randn(5, 4), "negative": torch.randn(5, 4)},
         margin=1.5, p=2.0, swap=False)
    case("triplet_swap_p1", F.triplet_margin_loss,
         {"anchor": torch.randn(5, 4), "positive": torch.randn(5, 4), "negative": torch.randn(5, 4)},
         margin=2.0, p=1.0, swap=True)
    return store, meta


# --------------------------------------------------------------------------
# resize.safetensors: F.interpolate, pixel_shuffle, 1-d pools
# --------------------------------------------------------------------------

def gen_resize():
    torch.manual_seed(3)
    store, meta = {}, {}

    def case(name, fn, x, **kw):
        xl = x.clone().requires_grad_(True)
        y = fn(xl, **kw)
        gy = torch.randn_like(y)
        (y * gy).sum().backward()
        store.update({f"{name}.x": x.clone(), f"{name}.y": y.detach().clone(), f"{name}.gy": gy,
                      f"{name}.gx": xl.grad.clone()})
        meta[name] = json.dumps({"op": fn.__name__, **kw})

    x4, x3, x5 = torch.randn(2, 3, 5, 7), torch.randn(2, 3, 9), torch.randn(1, 2, 3, 4, 5)
    case("nearest_size", F.interpolate, x4, size=(8, 11), mode="nearest")
    case("nearest_scale", F.interpolate, x4, scale_factor=(2.0, 1.5), mode="nearest")
    case("nearest_down", F.interpolate, x4, size=(3, 4), mode="nearest")
    case("nearest_exact", F.interpolate, x4, size=(8, 4), mode="nearest-exact")
    case("bilinear", F.interpolate, x4, size=(8, 11), mode="bilinear", align_corners=False)
    case("bilinear_ac", F.interpolate, x4, size=(3, 13), mode="bilinear", align_corners=True)
    case("bilinear_scale", F.interpolate, x4, scale_factor=(1.7, 0.6), mode="bilinear")
    case("linear", F.interpolate, x3, size=14, mode="linear")
    case("trilinear", F.interpolate, x5, scale_factor=2.0, mode="trilinear", align_corners=True)
    case("nearest_1d_scale", F.interpolate, x3, scale_factor=2.5, mode="nearest")
    case("pixel_shuffle", F.pixel_shuffle, torch.randn(2, 8, 3, 4), upscale_factor=2)
    case("pixel_unshuffle", F.pixel_unshuffle, torch.randn(2, 2, 6, 4), downscale_factor=2)
    case("max_pool1d", F.max_pool1d, x3, kernel_size=3, stride=2, padding=1)
    case("avg_pool1d", F.avg_pool1d, x3, kernel_size=4, stride=2, padding=2, count_include_pad=False, ceil_mode=True)
    case("adaptive_avg_pool1d", F.adaptive_avg_pool1d, x3, output_size=4)
    return store, meta


# --------------------------------------------------------------------------
# math.safetensors: rounding, logarithmic, trigonometric, hyperbolic and division-like elementwise ops
# --------------------------------------------------------------------------

def gen_math():
    torch.manual_seed(4)
    store, meta = {}, {}
    # Inputs in f64 on each op's domain, with its edge values (ties, signed zeros, infinities, NaN) appended;
    # the gradients are taken on the finite interior only.
    inf, nan = float("inf"), float("nan")
    unary = {
        "floor": (-4, 4, [2.5, -2.5, -0.0, inf, -inf, nan]),
        "ceil": (-4, 4, [2.5, -2.5, -0.0, inf, nan]),
        "round": (-4, 4, [0.5, 1.5, 2.5, -0.5, -2.5, inf, nan]),
        "trunc": (-4, 4, [2.7, -2.7, -0.0, inf, nan]),
        "frac": (-4, 4, [2.75, -2.75, -0.0]),
        "log1p": (-0.9, 4, [-1.0, -0.0, 1e-20, inf]),
        "expm1": (-4, 4, [1e-20, -0.0, -inf, 800.0]),
        "log2": (0.1, 8, [0.0, 1.0, 1024.0, inf]),
        "log10": (0.1, 8, [0.0, 1.0, 1000.0, inf]),
        "exp2": (-4, 4, [-inf, 10.0, 2000.0]),
        "tan": (-1.4, 1.4, [-0.0]),
        "atan": (-4, 4, [inf, -inf, -0.0]),
        "asin": (-0.95, 0.95, [1.0, -1.0, 1.5]),
        "acos": (-0.95, 0.95, [1.0, -1.0, 1.5]),
        "sinh": (-4, 4, [-0.0, 1000.0]),
        "cosh": (-4, 4, [1000.0, -inf]),
        "asinh": (-4, 4, [-0.0, inf]),
        "acosh": (1.05, 5, [1.0, 0.5, inf]),
        "atanh": (-0.95, 0.95, [1.0, -1.0, 2.0]),
        "erfc": (-4, 4, [-inf, inf, 10.0]),
        "erfinv": (-0.999, 0.999, [0.0, 1.0, -1.0, 1.5, 0.9999999, -1e-10]),
    }
    for name, (lo, hi, edges) in unary.items():
        fn = getattr(torch, name)
        x = torch.rand(24, dtype=torch.float64) * (hi - lo) + lo
        xl = x.clone().requires_grad_(True)
        y = fn(xl)
        gy = torch.randn_like(y)
        (y * gy).sum().backward()
        xe = torch.tensor(edges, dtype=torch.float64)
        store.update({f"{name}.x": x, f"{name}.y": y.detach(), f"{name}.gy": gy, f"{name}.gx": xl.grad,
                      f"{name}.edge_x": xe, f"{name}.edge_y": fn(xe),
                      f"{name}.f32_y": fn(x.float()).double()})
        meta[name] = json.dumps({"domain": [lo, hi]})
    a = torch.randn(6, 5, dtype=torch.float64) * 3
    b = torch.randn(5, dtype=torch.float64) * 2
    b[2] = -b[2].abs() - 0.5
    for name in ["atan2", "hypot", "logaddexp", "fmod", "remainder", "floor_divide"]:
        fn = getattr(torch, name)
        al, bl = a.clone().requires_grad_(True), b.clone().requires_grad_(True)
        y = fn(al, bl)
        gy = torch.randn_like(y)
        if name != "floor_divide":
            (y * gy).sum().backward()
            store.update({f"{name}.ga": al.grad, f"{name}.gb": bl.grad})
        store.update({f"{name}.a": a, f"{name}.b": b, f"{name}.y": y.detach(), f"{name}.gy": gy})
    ia = torch.tensor([7, -7, 7, -7, 0, 9, -9, 2**62], dtype=torch.int64)
    ib = torch.tensor([3, 3, -3, -3, 5, -1, -1, -1], dtype=torch.int64)
    for name in ["fmod", "remainder", "floor_divide"]:
        store[f"int_{name}"] = getattr(torch, name)(ia, ib)
    store["int_a"], store["int_b"] = ia, ib
    ea = torch.tensor([inf, -inf, inf, -inf, nan, 1.0, 5.5, -5.5, 0.0], dtype=torch.float64)
    eb = torch.tensor([inf, -inf, -inf, 2.0, 1.0, 0.0, -2.0, 2.0, -1.0], dtype=torch.float64)
    store["edge_a"], store["edge_b"] = ea, eb
    for name in ["atan2", "hypot", "logaddexp", "fmod", "remainder", "floor_divide"]:
        store[f"{name}.edge_y"] = getattr(torch, name)(ea, eb)
    w = torch.rand(6, 5, dtype=torch.float64)
    store["lerp.w"] = w
    store["lerp.y"] = torch.lerp(a, b.expand(6, 5), w)
    store["lerp.y_scalar"] = torch.lerp(a, b.expand(6, 5), 0.75)
    p = torch.rand(7, dtype=torch.float64)
    p[0], p[1] = 0.0, 1.0
    store["logit.x"], store["logit.y"], store["logit.y_eps"] = p, torch.logit(p), torch.logit(p, eps=1e-3)
    return store, meta


# --------------------------------------------------------------------------
# layers.safetensors: F.pad's modes, instance norm, adaptive max pooling
# --------------------------------------------------------------------------

def gen_layers():
    torch.manual_seed(5)
    store, meta = {}, {}
    pads = {
        "reflect_1d": ((2, 3, 6), (2, 3), "reflect"),
        "reflect_1d_crop": ((2, 3, 6), (-1, 5), "reflect"),
        "reflect_2d": ((2, 3, 5, 6), (1, 2, 4, 0), "reflect"),
        "reflect_2d_unbatched": ((3, 5, 6), (3, 3, 2, 2), "reflect"),
        "reflect_3d": ((1, 2, 3, 4, 5), (1, 1, 2, 0, 0, 2), "reflect"),
        "replicate_1d": ((2, 3, 4), (5, 2), "replicate"),
        "replicate_2d": ((2, 2, 3, 4), (2, -1, 6, 1), "replicate"),
        "replicate_3d": ((1, 2, 3, 4, 5), (1, 2, 3, 0, 1, 4), "replicate"),
        "circular_1d": ((2, 3, 4), (4, 2), "circular"),
        "circular_2d": ((2, 2, 3, 4), (-1, 3, 3, 1), "circular"),
        "circular_3d": ((1, 2, 3, 4, 5), (2, 1, 0, 4, 3, 3), "circular"),
        "constant_2d": ((2, 3, 4, 5), (1, 2, -1, 3), "constant"),
    }
    for name, (shape, pad, mode) in pads.items():
        x = torch.randn(*shape)
        xl = x.clone().requires_grad_(True)
        kw = {"value": 1.5} if mode == "constant" else {}
        y = F.pad(xl, pad, mode=mode, **kw)
        gy = torch.randn_like(y)
        (y * gy).sum().backward()
        store.update({f"pad_{name}.x": x, f"pad_{name}.y": y.detach(), f"pad_{name}.gy": gy,
                      f"pad_{name}.gx": xl.grad})
        meta[f"pad_{name}"] = json.dumps({"pad": pad, "mode": mode, **kw})
    norms = {"in_1d": (4, 3, 7), "in_2d": (3, 4, 5, 6), "in_3d": (2, 3, 2, 3, 4)}
    for name, shape in norms.items():
        c = shape[1]
        x = torch.randn(*shape) * 2 + 0.5
        w, b = torch.rand(c) + 0.5, torch.randn(c)
        rm, rv = torch.randn(c), torch.rand(c) + 0.5
        xl, wl, bl = (t.clone().requires_grad_(True) for t in (x, w, b))
        rm1, rv1 = rm.clone(), rv.clone()
        y = F.instance_norm(xl, rm1, rv1, wl, bl, use_input_stats=True, momentum=0.3, eps=1e-5)
        gy = torch.randn_like(y)
        (y * gy).sum().backward()
        y_eval = F.instance_norm(x, rm, rv, w, b, use_input_stats=False, eps=1e-5)
        y_plain = F.instance_norm(x)
        store.update({f"{name}.x": x, f"{name}.weight": w, f"{name}.bias": b, f"{name}.running_mean": rm,
                      f"{name}.running_var": rv, f"{name}.y": y.detach(), f"{name}.gy": gy, f"{name}.gx": xl.grad,
                      f"{name}.gweight": wl.grad, f"{name}.gbias": bl.grad, f"{name}.running_mean_after": rm1,
                      f"{name}.running_var_after": rv1, f"{name}.y_eval": y_eval, f"{name}.y_plain": y_plain})
        meta[name] = json.dumps({"momentum": 0.3, "eps": 1e-5})
    pools = {"amp_even": ((2, 3, 8, 6), (4, 3)), "amp_odd": ((2, 3, 7, 10), (3, 4)), "amp_up": ((1, 2, 3, 5), (5, 7)),
             "amp_global": ((2, 3, 5, 7), (1, 1))}
    for name, (shape, size) in pools.items():
        x = torch.randn(*shape)
        x[0, 0, 0, 0] = x[0, 0, 0, 1] = 10.0  # a tie for the maximum: the first position takes the gradient
        xl = x.clone().requires_grad_(True)
        y = F.adaptive_max_pool2d(xl, size)
        gy = torch.randn_like(y)
        (y * gy).sum().backward()
        store.update({f"{name}.x": x, f"{name}.y": y.detach(), f"{name}.gy": gy, f"{name}.gx": xl.grad})
        meta[name] = json.dumps({"output_size": size})
    return store, meta


# --------------------------------------------------------------------------

def main():
    generators = {
        "conv.safetensors": gen_conv,
        "norm_pool.safetensors": gen_norm_pool,
        "loss.safetensors": gen_loss,
        "optim.safetensors": gen_optim,
        "optim_more.safetensors": gen_optim_more,
        "loss_more.safetensors": gen_loss_more,
        "resize.safetensors": gen_resize,
        "math.safetensors": gen_math,
        "layers.safetensors": gen_layers,
    }
    # Named files only (say, a new one generated with a newer torch, leaving the others as they are).
    if len(sys.argv) > 1:
        generators = {k: v for k, v in generators.items() if k in sys.argv[1:]}
    total = 0
    for fname, gen in generators.items():
        tensors, case_meta = gen()
        tensors = {k: v.detach().clone() for k, v in tensors.items()}
        for k, v in tensors.items():
            assert v.dtype in (torch.float64, torch.int64), f"{k}: {v.dtype}"
        meta = {"generator": "tests/golden/gen_golden.py", "torch": torch.__version__, **case_meta}
        path = os.path.join(OUT_DIR, fname)
        write_safetensors(path, tensors, meta)

        # Round-trip check with the independent reader above.
        back, back_meta = read_safetensors(path)
        assert set(back) == set(tensors), f"{fname}: tensor names differ"
        for k, v in tensors.items():
            r = back[k]
            assert r.dtype == v.dtype and list(r.shape) == list(v.shape), f"{fname}:{k} dtype/shape"
            assert torch.equal(r.view(torch.int64) if r.is_floating_point() else r,
                               v.view(torch.int64) if v.is_floating_point() else v), f"{fname}:{k} values differ"
        assert back_meta == {k: str(v) for k, v in meta.items()}, f"{fname}: metadata differs"

        size = os.path.getsize(path)
        total += size
        print(f"{fname}: {len(tensors)} tensors, {size} bytes, round-trip OK")
    print(f"total {total} bytes")


if __name__ == "__main__":
    main()
