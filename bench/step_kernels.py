"""The reference step's kernels, before and after, on the same real batches (GPU; runs on CPU for a smoke test).

    python bench/step_kernels.py [--preset h200] [--micro 16] [--rounds 3] [--out DIR] [--profile]

Real micro-batches of the embedded sample data (decoded and preprocessed by vlmdata's loader as for Bridge's
Qwen-VL collate, micro-batch 2, padded to a multiple of 128), held in memory. Contenders, interleaved in
rotating order over ``--rounds`` rounds after every contender has run every batch once (shapes warmed: cuDNN
plans, allocator), each one pass over the ``--micro`` batches:

- ``today``: transformers' SDPA path (the vision tower splits its packed patches image by image in every
  block, a host sync per block) and one optimizer step per micro-batch (the audit before Bridge semantics);
- ``sdpa-gbs``: the same attention, one optimizer step per ``--micro`` micro-batches (Bridge's global step);
- ``varlen-gbs``: ``vlmdata.audit.workload.kernels``' variable-length flash attention over all images of a
  micro-batch (no per-block host round-trip; the vision index tensors computed on the host), Bridge's step;
- ``varlen-gbs-rms``: the same with torch's fused RMSNorm (``kernels.fuse_rms_norm``);
- ``perimage-gbs-rms``: per-image SDPA split by host-known lengths (no sync; cuDNN), fused RMSNorm;
- ``varlen-gbs-rms-cv`` / ``-cd`` / ``-ca``: ``varlen-gbs-rms`` with the vision blocks, the decoder layers or
  both run through ``torch.compile`` (``compiled.compile_blocks``; compiled during the warm-up pass, whose
  time is printed);
- ``perimage-gbs-rms-ca``: both compiled, the vision attention one SDPA call per image (cuDNN on Hopper),
  outside the compiled graph.

``--contenders a,b,c`` runs only those (``today`` always: every speed-up is against it).

Per contender: ms per micro-batch (min / median / max over rounds) and the TFLOP/s of every stage (model FLOPs
of the part the stage runs / its device time, medians). Then, with ``--profile``, the top CUDA kernels of
one ``varlen-gbs`` global step (torch.profiler), and a check of one-off costs per new shape: new image sizes
(random grids no batch had) timed the first and the second time, for both attention paths.
Also checks on the device that both attention paths compute the same outputs (relative error).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
from vlmdata import sample_data_path  # noqa: E402
from vlmdata.audit.report.run_tables import summary_stage_tflops  # noqa: E402
from vlmdata.audit.workload import compiled, kernels  # noqa: E402
from vlmdata.audit.workload.flops import step_flops  # noqa: E402
from vlmdata.audit.workload.model import IMAGE_TOKEN_ID, build_model  # noqa: E402
from vlmdata.audit.workload.step import STAGES, TrainStep, mrope_position_ids  # noqa: E402
from vlmdata.loaders.api import make_loader  # noqa: E402
from vlmdata.loaders.options import LoaderOptions  # noqa: E402


def real_batches(n: int, workers: int) -> list[dict]:
    opts = LoaderOptions(model="qwen3-vl", seq_length=4096, micro_batch_size=2, num_workers=workers, num_epochs=None)
    it = iter(make_loader(sample_data_path(), opts))
    return [next(it) for _ in range(n)]


def to_device(batch: dict, dev) -> dict:
    out = {}
    for k, v in batch.items():
        if isinstance(v, torch.Tensor):
            out[k] = v.pin_memory() if dev.type == "cuda" else v
        elif k == "visual_inputs" and v is not None:
            out[k] = {
                "pixel_values": v.pixel_values.pin_memory() if dev.type == "cuda" else v.pixel_values,
                "image_grid_thw": v.image_grid_thw,
            }
        else:
            out[k] = v
    return out


def set_attention(model, name: str) -> None:
    """today / sdpa-*: transformers' SDPA path and its RMSNorm; varlen-*: packed flash vision attention;
    perimage-*: per-image SDPA split on the host; *-rms: with torch's fused RMSNorm."""
    if name.startswith(("varlen", "perimage")):
        kernels.use_fast_attention(model.config)
        kernels.set_segment_mode("per_image" if name.startswith("perimage") else "varlen")
    else:
        kernels.use_sdpa(model.config)
    kernels.set_fused_norm("-rms" in name)
    compiled.set_compiled({"-cv": "vision", "-cd": "decoder", "-ca": "all"}.get(name[-3:], "none"))


def run_pass(step: TrainStep, model, name: str, batches: list[dict]) -> list[dict]:
    set_attention(model, name)
    if name == "today":
        return [step(b) for b in batches]
    step.begin(len(batches))
    for b in batches:
        step.micro(b)
    return [step.finish()]


def summarise(results: list[list[dict]], flops: dict, n_micro: int) -> dict:
    """Per-round ms per micro-batch and the median stage TFLOP/s."""
    per_round, tflops = [], []
    for rs in results:
        total = sum(r["times_ms"]["total"] for r in rs)
        per_round.append(total / n_micro)
        stages = {k: sum(r["times_ms"][k] for r in rs) for k in STAGES}
        summary = {"stages_ms": stages, "step_ms": {"mean": total}}
        tflops.append(summary_stage_tflops(summary, [flops]))
    keys = tflops[0].keys()
    med = {k: statistics.median([t[k] for t in tflops if t.get(k) is not None] or [0.0]) for k in keys}
    return {"ms_per_micro": per_round, "tflops": med}


def correctness(dev) -> dict:
    """Outputs of both attention paths on one image batch and a packed two-sample row (small preset)."""
    model = build_model("small", dev, seed=0)
    model.eval()
    grid = torch.tensor([[1, 16, 20], [1, 8, 12], [1, 20, 8]])
    n = int(grid.prod(-1).sum())
    pv = torch.randn(n, 1536, device=dev)
    vis = (grid.prod(-1) // 4).tolist()
    ids = torch.full((1, 40 + sum(vis)), 100, device=dev)
    pos = 5
    for v in vis:
        ids[0, pos : pos + v] = IMAGE_TOKEN_ID
        pos += v + 2
    batch = {"input_ids": ids.cpu(), "visual_inputs": {"pixel_values": pv, "image_grid_thw": grid}}
    p = mrope_position_ids(model, batch).to(dev)
    out = {}
    with torch.no_grad():
        kernels.use_sdpa(model.config)
        ref = model.model(input_ids=ids, position_ids=p, pixel_values=pv, image_grid_thw=grid.to(dev)).last_hidden_state
        kernels.use_fast_attention(model.config)
        kw = {
            k: (v.to(dev) if isinstance(v, torch.Tensor) else v)
            for k, v in kernels.vision_kwargs(model.model.visual, grid).items()
        }
        new = model.model(
            input_ids=ids, position_ids=p, pixel_values=pv, image_grid_thw=grid.to(dev), **kw
        ).last_hidden_state
        out["vision+decoder rel err"] = float((new.float() - ref.float()).norm() / ref.float().norm())
        # packed decoder: two text rows as one packed row vs separately
        a, b = torch.randint(0, 1000, (1, 50), device=dev), torch.randint(0, 1000, (1, 70), device=dev)
        sep = [model.model(input_ids=x, use_cache=False).last_hidden_state for x in (a, b)]
        cu = torch.tensor([0, 50, 120], dtype=torch.int32, device=dev)
        posp = torch.cat([torch.arange(50), torch.arange(70)]).view(1, -1).to(dev)
        with kernels.packed(cu, 70):
            packed = model.model(input_ids=torch.cat([a, b], 1), position_ids=posp, use_cache=False).last_hidden_state
        ref2 = torch.cat(sep, 1)
        out["packed decoder rel err"] = float((packed.float() - ref2.float()).norm() / ref2.float().norm())
    out["varlen kernel"] = kernels.kernel_name(dev)
    del model
    return out


def new_shape_costs(step: TrainStep, model, dev, k: int = 8, compiled: bool = False) -> dict:
    """Forward + backward of a one-image batch with a grid no batch had: first call vs second call (ms)."""
    g = torch.Generator().manual_seed(1)
    out = {}
    names = ("sdpa", "varlen-rms", "perimage-rms") + (("varlen-rms-ca", "perimage-rms-ca") if compiled else ())
    for name in names:
        set_attention(model, name)
        first, second = [], []
        for _ in range(k):
            h, w = (int(torch.randint(10, 40, (1,), generator=g)) * 2 for _ in range(2))
            grid = torch.tensor([[1, h, w]])
            n = h * w
            ids = torch.full((1, n // 4 + 64), 100)
            ids[0, 10 : 10 + n // 4] = IMAGE_TOKEN_ID
            S = -(-ids.shape[1] // 128) * 128
            ids = torch.nn.functional.pad(ids, (0, S - ids.shape[1]), value=0)
            labels = ids.clone()
            batch = {
                "input_ids": ids,
                "labels": labels,
                "loss_mask": torch.ones_like(ids, dtype=torch.float32),
                "position_ids": torch.arange(S).view(1, -1),
                "visual_inputs": {"pixel_values": torch.randn(n, 1536), "image_grid_thw": grid},
            }
            for dst in (first, second):
                torch.cuda.synchronize() if dev.type == "cuda" else None
                t = time.perf_counter()
                step.warm(batch)
                dst.append((time.perf_counter() - t) * 1e3)
        out[name] = {
            "first_ms_median": statistics.median(first),
            "second_ms_median": statistics.median(second),
            "extra_ms_per_new_shape": statistics.median([a - b for a, b in zip(first, second)]),
        }
    return out


def profile(step: TrainStep, model, batches: list[dict], out_dir: str | None, name: str = "varlen-gbs-rms") -> str:
    from torch.profiler import ProfilerActivity
    from torch.profiler import profile as prof

    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if torch.cuda.is_available() else [])
    with prof(activities=acts) as p:
        run_pass(step, model, name, batches[:4])
    sort = "cuda_time_total" if torch.cuda.is_available() else "cpu_time_total"
    table = p.key_averages().table(sort_by=sort, row_limit=40, max_name_column_width=60)
    if out_dir:
        with open(os.path.join(out_dir, f"profile-{name}.txt"), "w") as f:
            f.write(table)
    return table


def compiled_correctness(dev) -> dict:
    """The small preset in training mode: plain and ``compile_blocks`` (both in the device's dtype) against the
    same model in fp32, plain (same weights, inputs rounded alike); a linear loss (outputs times a fixed random
    tensor), so that errors are not amplified. Relative errors of the outputs and of every parameter's
    gradient (median and max over parameters)."""

    def inputs(model):
        grid = torch.tensor([[1, 16, 20], [1, 8, 12], [1, 20, 8]])
        n = int(grid.prod(-1).sum())
        g = torch.Generator().manual_seed(3)
        pv = torch.randn(n, 1536, generator=g).bfloat16().float()
        vis = (grid.prod(-1) // 4).tolist()
        ids = torch.full((1, 40 + sum(vis)), 100)
        pos = 5
        for v in vis:
            ids[0, pos : pos + v] = IMAGE_TOKEN_ID
            pos += v + 2
        p = mrope_position_ids(model, {"input_ids": ids, "visual_inputs": {"pixel_values": pv, "image_grid_thw": grid}})
        kw = {
            k: (v.to(dev) if isinstance(v, torch.Tensor) else v)
            for k, v in kernels.vision_kwargs(model.model.visual, grid).items()
        }
        dtype = next(model.parameters()).dtype
        return ids.to(dev), p.to(dev), pv.to(dev, dtype), grid.to(dev), kw

    def run(model):
        ids, p, pv, grid, kw = inputs(model)
        model.zero_grad()
        out = model.model(input_ids=ids, position_ids=p, pixel_values=pv, image_grid_thw=grid, **kw)
        h = out.last_hidden_state.float()
        r = torch.randn(h.shape, generator=torch.Generator().manual_seed(4)).to(dev)
        (h * r).sum().backward()
        return h.detach(), [q.grad.detach().float().clone() for q in model.parameters() if q.grad is not None]

    def rel(a, b):
        return float((a - b).norm() / b.norm().clamp_min(1e-30))

    ref_model = build_model("small", dev, dtype=torch.float32, seed=0)
    ref, gref = run(ref_model)
    del ref_model
    model = build_model("small", dev, seed=0)
    compiled.set_compiled("none")
    plain, gplain = run(model)
    compiled.compile_blocks(model, "all")
    compiled.set_compiled("all")
    comp, gcomp = run(model)
    compiled.set_compiled("none")
    ep = [rel(a, b) for a, b in zip(gplain, gref)]
    ec = [rel(a, b) for a, b in zip(gcomp, gref)]
    return {
        "dtype": str(next(model.parameters()).dtype),
        "plain vs fp32: output": rel(plain, ref),
        "compiled vs fp32: output": rel(comp, ref),
        "plain vs fp32: grad median / max": [statistics.median(ep), max(ep)],
        "compiled vs fp32: grad median / max": [statistics.median(ec), max(ec)],
        "compiled vs plain: output": rel(comp, plain),
        "params with grads": len(gref),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--preset", default="h200")
    ap.add_argument("--micro", type=int, default=16)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--workers", type=int, default=4)
    ap.add_argument("--out")
    ap.add_argument("--profile", action="store_true")
    ap.add_argument("--compile", action="store_true", help="also the torch.compile contenders")
    ap.add_argument("--compiled-check", action="store_true", help="only check compiled against plain (small preset)")
    ap.add_argument("--contenders", help="comma-separated contenders to run (default: all; today always)")
    args = ap.parse_args()
    dev = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if args.out:
        os.makedirs(args.out, exist_ok=True)
    print("torch", torch.__version__, "device", dev, torch.cuda.get_device_name() if dev.type == "cuda" else "")
    if args.compiled_check:
        print("compiled correctness:", json.dumps(compiled_correctness(dev)))
        return
    check = correctness(dev)
    print("correctness:", json.dumps(check))
    batches = [to_device(b, dev) for b in real_batches(args.micro, args.workers)]
    model = build_model(args.preset, dev, seed=0)
    step = TrainStep(model, logits="all")
    flops: dict = {}
    for b in batches:
        for k, v in step_flops(model.config, b).items():
            flops[k] = flops.get(k, 0) + v
    flops["flops"] = flops["total_flops"]
    names = ["today", "sdpa-gbs", "varlen-gbs", "varlen-gbs-rms", "perimage-gbs-rms"]
    if args.compile:
        print("compiled blocks:", compiled.compile_blocks(model, "all"))
        names += [
            "varlen-gbs-rms-cv",
            "varlen-gbs-rms-cd",
            "varlen-gbs-rms-ca",
            "perimage-gbs-rms-ca",
        ]
    if args.contenders:
        wanted = set(args.contenders.split(","))
        names = [n for n in names if n == "today" or n in wanted]
    warm = {}
    for name in names:  # warm every shape on both attention paths, and the optimizer (and compile)
        t = time.perf_counter()
        run_pass(step, model, name, batches)
        warm[name] = round(time.perf_counter() - t, 1)
    print(f"warm-up s per contender {warm}; compile counters {kernels.compile_counters()}; load {os.getloadavg()}")
    results: dict[str, list] = {n: [] for n in names}
    for r in range(args.rounds):
        for name in names[r % len(names) :] + names[: r % len(names)]:
            results[name].append(run_pass(step, model, name, batches))
    summary = {n: summarise(results[n], flops, len(batches)) for n in names}
    base = statistics.median(summary["today"]["ms_per_micro"])
    print(
        f"\n{'contender':12s} {'ms/micro min/med/max':>24s} {'speed-up':>9s}  TFLOP/s: "
        + " ".join(f"{k}" for k in summary["today"]["tflops"])
    )
    for n in names:
        ms = summary[n]["ms_per_micro"]
        print(
            f"{n:12s} {min(ms):7.1f} / {statistics.median(ms):6.1f} / {max(ms):6.1f}   {base / statistics.median(ms):6.2f}x  "
            + " ".join(f"{k}={v:.0f}" for k, v in summary[n]["tflops"].items())
        )
    costs = new_shape_costs(step, model, dev, compiled=args.compile) if dev.type == "cuda" else None
    print("one-off cost per new image size:", json.dumps(costs))
    print(f"load average at the end {os.getloadavg()}")
    if args.compile:  # last: the small model's shapes would otherwise join the compiled graphs' guards
        check.update(compiled_correctness(dev))
        print("compiled correctness:", json.dumps(check))
    if args.out:
        with open(os.path.join(args.out, "kernels.json"), "w") as f:
            json.dump(
                {
                    "correctness": check,
                    "summary": summary,
                    "new_shape_costs": costs,
                    "flops": flops,
                    "micro_batches": len(batches),
                    "warmup_s": warm,
                    "compile_counters": kernels.compile_counters(),
                    "preset": args.preset,
                },
                f,
                indent=1,
                default=str,
            )
    if args.profile:
        print(profile(step, model, batches, args.out))
        if "varlen-gbs-rms-ca" in names:
            print(profile(step, model, batches, args.out, "varlen-gbs-rms-ca"))


if __name__ == "__main__":
    main()
