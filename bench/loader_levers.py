"""The loader's speed levers (issue 12), each switched off in turn, against a JPEG-decode-only contender.

    PYTHONPATH=$PWD python bench/loader_levers.py --dataset small=/tmp/ds_small --dataset large=/tmp/ds_large \
        --rounds 5 --samples 240 [--json out.json]

Contenders (one process, inline iteration, ``torch.set_num_threads(1)`` as in a DataLoader worker; every
one handles the same first ``--samples`` samples of the dataset, shard order, micro-batch 4):

* ``loader``        make_loader(...).iter_inline(), every lever on (make_loader's cost included)
* ``tok_cold``      the same with the tokenizer caches emptied first: each make_loader loads its tokenizer
                    and private backend (lever 1 off)
* ``no_pool``       batch buffers freshly allocated for every batch (the recycling pool off)
* ``rows_joined``   each image patchified into its own array, the batch's arrays joined with
                    np.concatenate (lever 2 and the pool off)
* ``before``        all of the above off, and RGB images copied by qvu_to_rgb: the loader before issue 12
* ``exact``         exact_images=True (Pillow decode + both Pillow resizes, bit-identical to Bridge; no
                    reduced-scale decode); the default fast path decodes at DCT scale where the target is
                    at most half the source (lever 3)
* ``decode_only``   PIL decode (Image.open + load) of the same samples' image bytes, already in memory
* ``hf_pil``        Bridge-style collate with the HF PIL image processor + tokenizer (qwen-vl-utils
                    pre-resize; vlmdata.baselines.bridge_hf.BridgeReference) on the same samples, in memory
                    (no tar reading): the HF fast (torchvision) processor is used instead when torchvision
                    is installed (``hf_fast``)

Timing: contenders interleaved in rotating order (round r starts at contender r mod k) over ``--rounds``
rounds after one warm-up pass each; per contender CPU time (``time.process_time``: this process, all
threads) and wall time; samples per CPU-second is the per-core figure. Per-round ratios of ``loader`` to
each contender (min/median/max) and the load average at start and end are reported. No shared timing
module: this file is self-contained.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import io
import json
import os
import statistics
import sys
import time

import numpy as np
import torch
from PIL import Image

from vlmdata.dataset.reader import parse_raw
from vlmdata.dataset.tar import iter_shard
from vlmdata.loaders import api, collate, pixel_rows
from vlmdata.qwen import tokenize, vision

MBS = 4


def read_samples(dataset: str, n: int) -> list:
    out = []
    for p in api.resolve_shards(dataset):
        for r in iter_shard(p):
            out.append(parse_raw(r.files, r.key))
            if len(out) >= n:
                return out
    return out


@contextlib.contextmanager
def patched(obj, name, value):
    old = getattr(obj, name)
    setattr(obj, name, value)
    try:
        yield
    finally:
        setattr(obj, name, old)


def _eager_rows(data, spec, min_pixels, max_pixels, resize="bridge", exact=False):
    return vision.preprocess_any(data, spec, min_pixels, max_pixels, resize, exact)


def _joined(parts, patch_dim):
    return np.ascontiguousarray(parts[0]) if len(parts) == 1 else np.concatenate(parts)


class _FreshBuffers:
    @staticmethod
    def empty(shape):
        return np.empty(shape, dtype=np.float32)


def _old_to_rgb(img):
    if img.mode == "RGBA":
        bg = Image.new("RGB", img.size, (255, 255, 255))
        bg.paste(img, mask=img.split()[3])
        return bg
    return img.convert("RGB")


def _cold_tokenizer():
    tokenize._SHARED.clear()
    tokenize._BACKENDS.clear()
    tokenize.default_system_of_template.cache_clear()


def loader_run(dataset: str, n: int, exact: bool = False) -> int:
    got = 0
    for b in api.make_loader(dataset, micro_batch_size=MBS, shuffle=False, exact_images=exact).iter_inline():
        got += b["input_ids"].shape[0]
        if got >= n:
            break
    return got


def contenders(dataset: str, n: int, samples: list) -> dict:
    def loader():
        return loader_run(dataset, n)

    def tok_cold():
        _cold_tokenizer()
        return loader_run(dataset, n)

    def no_pool():
        with patched(pixel_rows, "BUFFERS", _FreshBuffers()):
            return loader_run(dataset, n)

    def rows_joined():
        with patched(api, "preprocess_rows", _eager_rows), patched(collate, "batch_pixels", _joined):
            return loader_run(dataset, n)

    def before():
        _cold_tokenizer()
        with (
            patched(api, "preprocess_rows", _eager_rows),
            patched(collate, "batch_pixels", _joined),
            patched(vision, "qvu_to_rgb", _old_to_rgb),
        ):
            return loader_run(dataset, n)

    def exact():
        return loader_run(dataset, n, exact=True)

    blobs = [im for s in samples for im in s.images]

    def decode_only():
        for b in blobs:
            with Image.open(io.BytesIO(b)) as im:
                im.load()
        return len(samples)

    out = {
        "loader": loader,
        "tok_cold": tok_cold,
        "no_pool": no_pool,
        "rows_joined": rows_joined,
        "before": before,
        "exact": exact,
        "decode_only": decode_only,
    }

    from vlmdata.baselines.bridge_hf import BridgeReference
    from vlmdata.qwen import build_qwen_processor

    if importlib.util.find_spec("torchvision") is not None:  # the HF fast image processor needs it
        backend, name = "torchvision", "hf_fast"
    else:
        backend, name = "pil", "hf_pil"
    ref = BridgeReference(build_qwen_processor("qwen3-vl", tokenizer=tokenize.shared_tokenizer(), backend=backend))
    groups = [samples[i : i + MBS] for i in range(0, len(samples), MBS)]

    def hf():
        for g in groups:
            ref.collate(g, sequence_length=4096)
        return len(samples)

    out[name] = hf
    return out


def measure(dataset: str, n: int, rounds: int) -> dict:
    samples = read_samples(dataset, n)
    n = len(samples)
    cs = contenders(dataset, n, samples)
    names = list(cs)
    for f in cs.values():  # warm: imports, tokenizer, first shapes, buffers
        f()
    cpu = {k: [] for k in names}
    wall = {k: [] for k in names}
    count = {}
    for r in range(rounds):
        order = names[r % len(names) :] + names[: r % len(names)]
        for k in order:
            c0, w0 = time.process_time(), time.perf_counter()
            count[k] = cs[k]()
            cpu[k].append(time.process_time() - c0)
            wall[k].append(time.perf_counter() - w0)
    rate = {k: [count[k] / c for c in cpu[k]] for k in names}
    rows = []
    for k in names:
        ratios = [a / b for a, b in zip(rate["loader"], rate[k])]
        rows.append(
            {
                "contender": k,
                "samples": count[k],
                "samples_per_cpu_s": statistics.median(rate[k]),
                "samples_per_wall_s": statistics.median(count[k] / w for w in wall[k]),
                "loader_ratio_min": min(ratios),
                "loader_ratio_median": statistics.median(ratios),
                "loader_ratio_max": max(ratios),
            }
        )
    return {
        "dataset": dataset,
        "samples": n,
        "images": sum(len(s.images) for s in samples),
        "rounds": rounds,
        "rows": rows,
    }


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description="The loader's speed levers, each off in turn, vs decode-only and HF.")
    ap.add_argument("--dataset", action="append", required=True, help="NAME=PATH (repeatable)")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--samples", type=int, default=240)
    ap.add_argument("--json")
    a = ap.parse_args(argv)
    torch.set_num_threads(1)
    res = {"load_start": [round(x, 2) for x in os.getloadavg()], "cpus": os.cpu_count(), "results": {}}
    for spec in a.dataset:
        name, _, path = spec.partition("=")
        res["results"][name] = measure(path, a.samples, a.rounds)
    res["load_end"] = [round(x, 2) for x in os.getloadavg()]
    print(f"load average start {res['load_start']} end {res['load_end']}; torch threads 1; micro-batch {MBS}")
    for name, r in res["results"].items():
        print(f"\n{name}: {r['dataset']} ({r['samples']} samples, {r['images']} images, {r['rounds']} rounds)")
        print(f"{'contender':<12} {'samples/CPU-s':>14} {'samples/wall-s':>15}   loader ratio min / median / max")
        for row in r["rows"]:
            print(
                f"{row['contender']:<12} {row['samples_per_cpu_s']:>14.1f} {row['samples_per_wall_s']:>15.1f}   "
                f"{row['loader_ratio_min']:.2f} / {row['loader_ratio_median']:.2f} / {row['loader_ratio_max']:.2f}"
            )
    if a.json:
        with open(a.json, "w") as f:
            json.dump(res, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
