"""Vision-tower attention and RMSNorm kernels at the reference model's real shapes (GPU).

    python bench/attention_kernels.py [--micro 16] [--rounds 5] [--out DIR]

The image grids of ``--micro`` real micro-batches of the embedded sample data (micro-batch 2, Bridge's pixel
limits), Qwen3-VL-30B-A3B's vision attention shape (16 heads of 72, bf16). Contenders, interleaved in
rotating order over ``--rounds`` rounds (each a pass over the micro-batches, forward and backward, device
time by CUDA events; every shape run once before timing, so one-off plan costs are excluded):

- ``varlen``: ``torch.nn.attention.varlen.varlen_attn`` over each micro-batch's packed images (flash);
- ``varlen-pad128``: the same with the head dim zero-padded to 128 (flash's best-tuned size);
- ``per-image {default,cudnn,flash,efficient}``: one ``scaled_dot_product_attention`` call per image, split
  by host-known lengths (no device sync), with torch's default backend choice or one forced.

Then RMSNorm over the decoder's shapes (8192 x 2048 hidden states, 8192 x 32 x 128 q-norm): transformers'
module (fp32 statistics, ~7 kernels) against torch's ``F.rms_norm``, forward and backward. Prints
min/median/max ms and TFLOP/s (attention: 4 * d * heads * sum n_i^2 forward, 2.5x that backward).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
from vlmdata import sample_data_path  # noqa: E402
from vlmdata.loaders.api import make_loader  # noqa: E402
from vlmdata.loaders.options import LoaderOptions  # noqa: E402

H, D = 16, 72


def grids(n: int) -> list[list[int]]:
    opts = LoaderOptions(model="qwen3-vl", seq_length=4096, micro_batch_size=2, images="shapes", num_epochs=None)
    it = iter(make_loader(sample_data_path(), opts))
    return [torch.as_tensor(next(it)["visual_inputs"].image_grid_thw).prod(-1).tolist() for _ in range(n)]


def make(lengths, dev):
    T = sum(lengths)
    q, k, v = (torch.randn(T, H, D, device=dev, dtype=torch.bfloat16, requires_grad=True) for _ in range(3))
    cu = torch.tensor([0, *torch.tensor(lengths).cumsum(0).tolist()], dtype=torch.int32, device=dev)
    return q, k, v, cu


def varlen(q, k, v, cu, lengths, pad=None):
    from torch.nn.attention.varlen import varlen_attn

    m = max(lengths)
    if pad:
        q, k, v = (F.pad(x, (0, pad - D)) for x in (q, k, v))
        return varlen_attn(q, k, v, cu, cu, m, m, scale=D**-0.5)[..., :D]
    return varlen_attn(q, k, v, cu, cu, m, m)


def per_image(q, k, v, cu, lengths, backend=None):
    outs = []
    for qs, ks, vs in zip(*(torch.split(x, lengths) for x in (q, k, v))):
        a, b, c = (x.transpose(0, 1).unsqueeze(0) for x in (qs, ks, vs))
        if backend is None:
            o = F.scaled_dot_product_attention(a, b, c)
        else:
            with sdpa_kernel(backend):
                o = F.scaled_dot_product_attention(a, b, c)
        outs.append(o[0].transpose(0, 1))
    return torch.cat(outs)


CONTENDERS = {
    "varlen": lambda *a: varlen(*a),
    "varlen-pad128": lambda *a: varlen(*a, pad=128),
    "per-image default": lambda *a: per_image(*a),
    "per-image cudnn": lambda *a: per_image(*a, backend=SDPBackend.CUDNN_ATTENTION),
    "per-image flash": lambda *a: per_image(*a, backend=SDPBackend.FLASH_ATTENTION),
    "per-image efficient": lambda *a: per_image(*a, backend=SDPBackend.EFFICIENT_ATTENTION),
}


def timed(fn, inputs) -> tuple[float, float]:
    """(forward ms, backward ms) over all micro-batches, CUDA events."""
    f = b = 0.0
    for args in inputs:
        e0, e1, e2 = (torch.cuda.Event(enable_timing=True) for _ in range(3))
        e0.record()
        out = fn(*args)
        e1.record()
        out.backward(torch.ones_like(out))
        e2.record()
        torch.cuda.synchronize()
        f += e0.elapsed_time(e1)
        b += e1.elapsed_time(e2)
        for x in args[:3]:
            x.grad = None
    return f, b


def rms_bench(dev, rounds: int) -> dict:
    from transformers.models.qwen3_vl_moe.modeling_qwen3_vl_moe import Qwen3VLMoeTextRMSNorm

    out = {}
    for shape in ((8192, 2048), (8192, 32, 128)):
        x = torch.randn(*shape, device=dev, dtype=torch.bfloat16, requires_grad=True)
        mod = Qwen3VLMoeTextRMSNorm(shape[-1]).to(dev, torch.bfloat16)
        fns = {"hf": lambda: mod(x), "F.rms_norm": lambda: F.rms_norm(x, (shape[-1],), mod.weight, 1e-6)}
        ref, new = fns["hf"](), fns["F.rms_norm"]()
        times = {n: [] for n in fns}
        for _ in range(rounds):
            for n, fn in fns.items():
                torch.cuda.synchronize()
                e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                e0.record()
                for _ in range(20):
                    y = fn()
                    y.backward(torch.ones_like(y))
                e1.record()
                torch.cuda.synchronize()
                times[n].append(e0.elapsed_time(e1) / 20)
        out[str(shape)] = {
            "rel_err": float((new.float() - ref.float()).norm() / ref.float().norm()),
            **{n: [min(t), statistics.median(t), max(t)] for n, t in times.items()},
        }
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--micro", type=int, default=16)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--out")
    args = ap.parse_args()
    dev = torch.device("cuda")
    gs = grids(args.micro)
    inputs = [(*make(g, dev), g) for g in gs]
    flops = sum(4 * D * H * sum(n * n for n in g) for g in gs)
    names = list(CONTENDERS)
    for n in names:  # one-off costs (cuDNN plans) before timing
        timed(CONTENDERS[n], inputs)
    res = {n: [] for n in names}
    for r in range(args.rounds):
        for n in names[r % len(names) :] + names[: r % len(names)]:
            res[n].append(timed(CONTENDERS[n], inputs))
    ref = CONTENDERS["per-image default"](*inputs[0])
    print(
        f"{args.micro} micro-batches, {sum(len(g) for g in gs)} images, {sum(map(sum, gs))} patches; load {os.getloadavg()}"
    )
    print(
        f"{'contender':22s} {'fwd ms min/med/max':>22s} {'bwd ms med':>10s} {'fwd TF/s':>8s} {'bwd TF/s':>8s}  rel err"
    )
    summary = {}
    for n in names:
        fw = [f for f, _ in res[n]]
        bw = [b for _, b in res[n]]
        err = float((CONTENDERS[n](*inputs[0]).float() - ref.float()).norm() / ref.float().norm())
        summary[n] = {"fwd_ms": fw, "bwd_ms": bw, "rel_err": err}
        print(
            f"{n:22s} {min(fw):6.2f} / {statistics.median(fw):6.2f} / {max(fw):6.2f} {statistics.median(bw):10.2f} "
            f"{flops / statistics.median(fw) / 1e9:8.0f} {2.5 * flops / statistics.median(bw) / 1e9:8.0f}  {err:.1e}"
        )
    rms = rms_bench(dev, args.rounds)
    print("rms_norm fwd+bwd ms [min, median, max]:", json.dumps(rms))
    if args.out:
        os.makedirs(args.out, exist_ok=True)
        with open(os.path.join(args.out, "attention_kernels.json"), "w") as f:
            json.dump({"attention": summary, "rms_norm": rms, "grids": gs}, f, indent=1)


if __name__ == "__main__":
    main()
