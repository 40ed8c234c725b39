"""vlmdata bench loader: samples/s per core, shards -> Bridge-ready Qwen-VL batches, vlmdata vs baselines."""

from __future__ import annotations

import argparse
import difflib
import os
import time

from vlmdata.cli.args import positive_int, worker_counts
from vlmdata.cli.console import EXIT_OK, UserError, out, print_json, progress, table
from vlmdata.qwen.spec import SPECS

BENCHMARKS = ("loader",)


def _benchmark(text: str) -> str:
    if text not in BENCHMARKS:
        close = difflib.get_close_matches(text, BENCHMARKS, n=1)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        raise argparse.ArgumentTypeError(f"unknown benchmark {text!r}{hint} (benchmarks: {', '.join(BENCHMARKS)}; "
                                         "vlmdata bench loader DATASET)")
    return text


def add_parser(sub):
    p = sub.add_parser("bench", help="benchmarks (bench loader)", description=(
        "vlmdata bench loader DATASET: samples/s per core from real shards to Bridge-ready batches, in one run:\n"
        "  bridge-hf-pil   Bridge's qwen2_5_collate_fn path replicated with the real HF processor (PIL backend):\n"
        "                  qwen-vl-utils pre-resize + apply_chat_template + processor(text, images) + loss mask\n"
        "  bridge-hf-tv    the same with the torchvision backend (needs torchvision)\n"
        "  bridge-collate  Bridge's own qwen2_5_collate_fn on the same examples (needs Megatron Bridge)\n"
        "  energon-bridge  Energon + Bridge's Qwen-VL task encoder on DATASET/.nv-meta (needs Megatron Bridge)\n"
        "  vlmdata         make_loader (fast image path), and vlmdata-exact (bit-exact Pillow path)\n"
        "All single-process (one core); --workers N,M adds a DataLoader-worker scaling table for vlmdata."),
        formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("what", metavar="BENCHMARK", type=_benchmark, help="the benchmark to run: loader")
    p.add_argument("dataset", help="vlmdata dataset folder with its shards (e.g. the sample data: "
                   "python -c 'import vlmdata; print(vlmdata.sample_data_path())')")
    p.add_argument("--model", default="qwen3-vl", choices=sorted(SPECS),
                   help="Qwen-VL family whose processor and batches are built (default qwen3-vl)")
    p.add_argument("--samples", type=positive_int, default=64,
                   help="samples per measurement (default 64; the dataset is repeated when smaller)")
    p.add_argument("--micro-batch-size", type=positive_int, default=4, help="samples per batch (default 4)")
    p.add_argument("--seq-length", type=positive_int, default=4096,
                   help="seq_length given to every path's collate (default 4096)")
    p.add_argument("--workers", type=worker_counts, default=(), metavar="N[,M...]",
                   help="comma list of DataLoader worker counts for an extra scaling table of the vlmdata loader "
                        "(e.g. 0,1,2; default: none)")
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    return p


def _samples(dataset, n):
    # imported when the command runs: `vlmdata --help` and this command's --help stay light
    from vlmdata.dataset.reader import parse_raw
    from vlmdata.dataset.tar import iter_shard
    from vlmdata.loaders.api import resolve_shards

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


def _import_bridge():
    """({"collate", "encoder", "energon"}, note) with Megatron Bridge's Qwen-VL collate and Energon task
    encoder, or (None, why). On a CPU host without transformer-engine, Bridge cannot be imported; if this is
    a source checkout, tests/bridge/te_stub.py (the contract test's import-time stub) is installed first."""
    import importlib.util

    if importlib.util.find_spec("megatron") is None or importlib.util.find_spec("megatron.bridge") is None:
        return None, "Megatron Bridge is not installed (scripts/bridge_env.sh builds a venv with it)"
    note = ""
    if importlib.util.find_spec("transformer_engine") is None:
        stub = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
                            "tests", "bridge", "te_stub.py")
        if not os.path.isfile(stub):
            return None, "Megatron Bridge needs transformer_engine, which is not installed"
        spec = importlib.util.spec_from_file_location("vlmdata_te_stub", stub)
        assert spec is not None and spec.loader is not None  # an existing .py file
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        mod.install()
        note = "transformer_engine stubbed at import (tests/bridge/te_stub.py): CPU host, data path only"
    try:
        import logging
        import warnings

        warnings.filterwarnings("ignore", category=FutureWarning)
        logging.getLogger("megatron.energon").setLevel(logging.ERROR)
        from megatron import energon
        from megatron.bridge.models.qwen_vl.data.collate_fn import qwen2_5_collate_fn  # pyright: ignore[reportMissingImports]  # optional: the Bridge venv
        from megatron.bridge.models.qwen_vl.data.energon import QwenVLTaskEncoder  # pyright: ignore[reportMissingImports]
    except Exception as e:
        return None, f"Megatron Bridge is not importable here ({type(e).__name__}: {e})"
    return {"collate": qwen2_5_collate_fn, "encoder": QwenVLTaskEncoder, "energon": energon}, note


def _energon_rate(bridge, dataset, proc, model, mbs, seq_length, n_samples):
    """samples/s of Bridge's Energon path: energon.get_train_dataset (no shuffle) + QwenVLTaskEncoder
    (its defaults: max_visual_tokens=16384, so every image is also run through the processor once to count
    tokens, then qwen2_5_collate_fn), one process, reading the dataset's own .nv-meta."""
    # imported when the command runs: `vlmdata --help` and this command's --help stay light
    from vlmdata.qwen.spec import get_spec

    e = bridge["energon"]
    enc = bridge["encoder"](tokenizer=proc.tokenizer, image_processor=proc, patch_size=get_spec(model).patch_size,
                            max_padding_length=seq_length)
    ds = e.get_train_dataset(dataset, batch_size=mbs, task_encoder=enc, split_part="train",
                             worker_config=e.WorkerConfig(rank=0, world_size=1, num_workers=0),
                             shuffle_buffer_size=None, max_samples_per_sequence=None, repeat=True)
    it = iter(e.get_loader(ds))
    next(it)  # warm up (opens the shards, first decode)
    n = 0
    t = time.perf_counter()
    while n < n_samples:
        n += len(next(it)["__keys__"])
    return n / (time.perf_counter() - t)


def bench_loader(dataset, model="qwen3-vl", samples=64, mbs=4, seq_length=4096, workers=(), stage=None):
    """Samples/s per core of Bridge's data paths and vlmdata's loader on the same samples of ``dataset``.

    Args:
        dataset: vlmdata dataset folder.
        model: Qwen-VL family (a key of ``vlmdata.qwen.spec.SPECS``).
        samples: samples per measurement.
        mbs: micro-batch size.
        seq_length: sequence length of the batches.
        workers: DataLoader worker counts for the scaling rows.
        stage: called with the name of each measurement as it starts (progress).

    Returns:
        ``{"rows": [{"name", "samples_per_s", "ratio_vs_fastest_baseline"}], "scaling", "notes", ...}``.
    """
    import importlib.util

    import torch

    # imported when the command runs: `vlmdata --help` and this command's --help stay light
    from vlmdata.baselines.bridge_hf import BridgeReference
    from vlmdata.loaders.api import make_loader
    from vlmdata.qwen.spec import build_qwen_processor, load_qwen_tokenizer

    torch.set_num_threads(1)
    tok = load_qwen_tokenizer()
    data = _samples(dataset, samples)
    res = {"dataset": dataset, "model": model, "samples": len(data), "micro_batch_size": mbs, "rows": [],
           "notes": []}

    def groups():
        return [data[i:i + mbs] for i in range(0, len(data), mbs)]

    stage = stage or (lambda name: None)
    stage("bridge-hf-pil")
    ref = BridgeReference(build_qwen_processor(model, tokenizer=tok))
    ref.collate(groups()[0], sequence_length=seq_length)  # warm up
    res["rows"].append({"name": "bridge-hf-pil", "samples_per_s": _time(
        lambda: [ref.collate(g, sequence_length=seq_length) for g in groups()], len(data))})
    if importlib.util.find_spec("torchvision") is not None:
        stage("bridge-hf-tv")
        ref_tv = BridgeReference(build_qwen_processor(model, tokenizer=tok, backend="torchvision"))
        res["rows"].append({"name": "bridge-hf-tv", "samples_per_s": _time(
            lambda: [ref_tv.collate(g, sequence_length=seq_length) for g in groups()], len(data))})
    else:
        res["notes"].append("bridge-hf-tv not run: torchvision is not installed")
    bridge, why = _import_bridge()
    if bridge is None:
        res["notes"].append(f"bridge-collate and energon-bridge not run: {why}")
    else:
        if why:
            res["notes"].append(why)
        proc = ref.processor

        def real_collate(gs):  # Bridge's real qwen2_5_collate_fn (its HF-dataset path), same examples
            for g in gs:
                bridge["collate"](ref._examples(g), proc, sequence_length=seq_length)

        stage("bridge-collate")
        real_collate(groups()[:1])  # warm up
        res["rows"].append({"name": "bridge-collate", "samples_per_s": _time(lambda: real_collate(groups()), len(data))})
        if os.path.isdir(os.path.join(dataset, ".nv-meta")):
            stage("energon-bridge")
            res["rows"].append({"name": "energon-bridge",
                                "samples_per_s": _energon_rate(bridge, dataset, proc, model, mbs, seq_length,
                                                               len(data))})
        else:
            res["notes"].append(f"energon-bridge not run: {dataset} has no .nv-meta (build it with vlmdata build)")

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

    stage("vlmdata")
    run_loader(False)
    res["rows"].append({"name": "vlmdata", "samples_per_s": max(run_loader(False) for _ in range(2))})
    stage("vlmdata-exact")
    res["rows"].append({"name": "vlmdata-exact", "samples_per_s": run_loader(True)})
    base = max(r["samples_per_s"] for r in res["rows"] if r["name"].startswith(("bridge", "energon")))
    for r in res["rows"]:
        r["ratio_vs_fastest_baseline"] = r["samples_per_s"] / base
    res["scaling"] = []
    for nw in workers:
        stage(f"vlmdata, {nw} workers")
        sps = run_loader(False, nw)
        res["scaling"].append({"workers": nw, "samples_per_s": sps, "per_worker": sps / max(nw, 1)})
    res["cpu_count"] = os.cpu_count()
    return res


def run(args) -> int:
    if not os.path.exists(args.dataset):
        raise UserError(f"{args.dataset}: not found (give a vlmdata dataset folder, e.g. the output of vlmdata build)")
    workers = list(args.workers)
    # measurements: bridge-hf-pil, bridge-hf-tv?, bridge-collate?, energon-bridge?, vlmdata, vlmdata-exact, scaling
    with progress("bench loader", unit="measurements", quiet=args.quiet or args.json) as advance:
        names = []

        def stage(name: str) -> None:
            if names:
                advance()
            names.append(name)
            advance.set_description(f"bench loader: {name}")

        res = bench_loader(args.dataset, args.model, args.samples, args.micro_batch_size, args.seq_length, workers,
                           stage=stage)
        advance()
    if args.json:
        print_json(res)
        return EXIT_OK
    out.print(table(f"{res['samples']} samples of {args.dataset}, {args.model}, micro-batch {res['micro_batch_size']}, "
                    "one core", ["path", "samples/s/core", "x fastest baseline"],
                    [[r["name"], f"{r['samples_per_s']:.1f}", f"{r['ratio_vs_fastest_baseline']:.2f}"]
                     for r in res["rows"]]))
    for n in res["notes"]:
        out.print(f"note: {n}", markup=False, soft_wrap=True)
    if res["scaling"]:
        out.print(table(f"vlmdata loader with DataLoader workers ({res['cpu_count']} cores)",
                        ["workers", "samples/s", "per worker"],
                        [[str(s["workers"]), f"{s['samples_per_s']:.1f}", f"{s['per_worker']:.1f}"]
                         for s in res["scaling"]]))
    return EXIT_OK
