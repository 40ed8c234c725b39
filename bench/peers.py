"""vlmdata against its peers, per CPU-second, interleaved: write rate and read rate on the same input.

    PYTHONPATH=. /work/peers-venv/bin/python bench/peers.py [--samples 2000] [--rounds 5] [--decode] [--json F]

Input: a LLaVA JSONL over COCO-like JPEGs made from the offline photos (``vlmdata.sources.photos``, 10% multi-image),
the same for every writer. Writers (each in this process, one worker, its outputs removed before each run):

* ``vlmdata``: ``vlmdata.build.build(jsonl, out, BuildOptions(workers=1), energon=False)`` (no Energon index:
  no peer writes one; ``vlmdata bench build`` times the whole command with it);
* ``webdataset``: ``webdataset.ShardWriter`` loop (the plain script of ``vlmdata bench build``);
* ``mds``: MosaicML streaming ``MDSWriter`` (columns json: str, images: pkl, no compression);
* ``litdata``: LitData ``optimize(fn, inputs, num_workers=1, chunk_bytes=64MB)`` (its worker process's CPU
  counted when it exits);
* ``hf-datasets``: Hugging Face ``Dataset.from_generator(..., cache_dir=fresh)`` + ``save_to_disk``.

Readers iterate every sample of what their writer wrote and touch the bytes of every image and the text
(no decode; ``--decode`` adds a Pillow decode of every image as a second table): ``vlmdata``
(``vlmdata.dataset.tar.iter_shard``), ``webdataset`` (``WebDataset``), ``mds`` (``StreamingDataset``, local),
``litdata`` (``StreamingDataset``), ``hf-datasets`` (``load_from_disk``, row iteration).

Every contender is timed with ``vlmdata.benchmarks.timing.interleave`` (rotating order, warm-up round,
wall + CPU incl. waited-for children, load average at start and end). The printout is markdown tables:
samples per CPU-s, median (min-max), and per round ``vlmdata / peer`` ratios (> 1: vlmdata faster).
Peers that are not installed are skipped with a note. Install them next to the main venv without
changing torch, e.g. ``pip install --no-deps mosaicml-streaming litdata`` + their import-time deps.
"""

from __future__ import annotations

import argparse
import importlib.util
import io
import json
import os
import pickle
import shutil
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from PIL import Image

from vlmdata.benchmarks.build import make_photo_input
from vlmdata.benchmarks.timing import Contender, interleave, spread
from vlmdata.dataset.tar import iter_shard
from vlmdata.ingest import BuildOptions, build
from vlmdata.loaders.api import resolve_shards

MAX_COUNT = 250


def records(jsonl: str) -> list[tuple[str, list[bytes]]]:
    """(record JSON text, image bytes) per line: what every writer is handed (the file reads are timed in
    vlmdata's build, so the peers read the files too: see ``_load``)."""
    root = os.path.dirname(jsonl)
    out = []
    with open(jsonl) as f:
        for line in f:
            rec = json.loads(line)
            ims = rec["image"] if isinstance(rec["image"], list) else [rec["image"]]
            out.append((line.strip(), [os.path.join(root, p) for p in ims]))
    return out


def _load(paths: list[str]) -> list[bytes]:
    res = []
    for p in paths:
        with open(p, "rb") as f:
            res.append(f.read())
    return res


def _rm(path: str):
    return lambda: shutil.rmtree(path, ignore_errors=True)


def _touch(images, text) -> int:
    return sum(len(b) for b in images) + len(text)


def _decode(images) -> None:
    for b in images:
        with Image.open(io.BytesIO(b)) as im:
            im.load()


def writers(jsonl: str, recs, tmp: str) -> tuple[list[Contender], dict[str, str], list[str]]:
    n = len(recs)
    outs = {k: os.path.join(tmp, k) for k in ("vlmdata", "webdataset", "mds", "litdata", "hf-datasets")}
    cs, notes = [], []

    def w_vlmdata():
        build(jsonl, outs["vlmdata"], BuildOptions(max_count=MAX_COUNT, workers=1), energon=False)

    cs.append(Contender("vlmdata", w_vlmdata, units=n, before=_rm(outs["vlmdata"])))

    import webdataset as wds

    def w_wds():
        os.makedirs(outs["webdataset"], exist_ok=True)
        with wds.ShardWriter(os.path.join(outs["webdataset"], "shard-%06d.tar"), maxcount=MAX_COUNT, verbose=0) as sink:
            for i, (text, paths) in enumerate(recs):
                s = {"__key__": f"s{i:09d}", "json": text.encode()}
                for j, b in enumerate(_load(paths)):
                    s[f"{j}.jpg"] = b
                sink.write(s)

    cs.append(Contender("webdataset", w_wds, units=n, before=_rm(outs["webdataset"])))

    if importlib.util.find_spec("streaming"):
        from streaming import MDSWriter

        def w_mds():
            with MDSWriter(
                out=outs["mds"], columns={"json": "str", "images": "pkl"}, size_limit=1 << 26, progress_bar=False
            ) as w:
                for text, paths in recs:
                    w.write({"json": text, "images": _load(paths)})

        cs.append(Contender("mds", w_mds, units=n, before=_rm(outs["mds"])))
    else:
        notes.append("mds skipped: mosaicml-streaming is not installed")

    if importlib.util.find_spec("litdata"):
        from litdata import optimize

        def w_lit():
            optimize(
                fn=_lit_item,
                inputs=recs,
                output_dir=outs["litdata"],
                chunk_bytes="64MB",
                num_workers=1,
                verbose=False,
                mode="overwrite",
            )

        cs.append(Contender("litdata", w_lit, units=n, before=_rm(outs["litdata"])))
    else:
        notes.append("litdata skipped: litdata is not installed")

    if importlib.util.find_spec("datasets"):
        import datasets

        datasets.disable_progress_bars()
        feats = datasets.Features(
            {"json": datasets.Value("string"), "images": datasets.Sequence(datasets.Value("binary"))}
        )

        def gen():
            for text, paths in recs:
                yield {"json": text, "images": _load(paths)}

        def w_hf():
            cache = os.path.join(tmp, "hf-cache")
            ds = datasets.Dataset.from_generator(gen, features=feats, cache_dir=cache)
            ds.save_to_disk(outs["hf-datasets"])
            del ds
            shutil.rmtree(cache, ignore_errors=True)

        cs.append(Contender("hf-datasets", w_hf, units=n, before=_rm(outs["hf-datasets"])))
    else:
        notes.append("hf-datasets skipped: datasets is not installed")
    return cs, outs, notes


def _lit_item(rec):
    text, paths = rec
    return {"json": text, "images": pickle.dumps(_load(paths))}


def readers(outs: dict[str, str], names: list[str], n: int, decode: bool) -> list[Contender]:
    cs = []
    touch = _decode if decode else (lambda images: None)

    def r_vlmdata():
        total = 0
        for p in resolve_shards(outs["vlmdata"]):
            for r in iter_shard(p):
                ims = [v for k, v in r.files.items() if k != "json"]
                touch(ims)
                total += _touch(ims, r.files["json"])
        return total

    cs.append(Contender("vlmdata", r_vlmdata, units=n))

    import webdataset as wds

    def r_wds():
        total = 0
        urls = sorted(os.path.join(outs["webdataset"], f) for f in os.listdir(outs["webdataset"]))
        for s in wds.WebDataset(urls, shardshuffle=False, empty_check=False):
            ims = [v for k, v in s.items() if k.endswith(".jpg")]
            touch(ims)
            total += _touch(ims, s["json"])
        return total

    cs.append(Contender("webdataset", r_wds, units=n))

    if "mds" in names:
        from streaming import StreamingDataset

        def r_mds():
            total = 0
            ds = StreamingDataset(local=outs["mds"], shuffle=False, batch_size=1, allow_unsafe_types=True)
            for s in ds:
                touch(s["images"])
                total += _touch(s["images"], s["json"])
            return total

        cs.append(Contender("mds", r_mds, units=n))

    if "litdata" in names:
        import litdata

        def r_lit():
            total = 0
            for s in litdata.StreamingDataset(input_dir=outs["litdata"]):
                ims = pickle.loads(s["images"])
                touch(ims)
                total += _touch(ims, s["json"])
            return total

        cs.append(Contender("litdata", r_lit, units=n))

    if "hf-datasets" in names:
        import datasets

        def r_hf():
            total = 0
            for row in datasets.load_from_disk(outs["hf-datasets"]):
                touch(row["images"])
                total += _touch(row["images"], row["json"])
            return total

        cs.append(Contender("hf-datasets", r_hf, units=n))
    return cs


def table(result, title: str) -> tuple[str, dict]:
    s = result.summary(baseline="vlmdata")
    lines = [
        f"**{title}**",
        "",
        "| contender | samples/CPU-s | samples/s | vlmdata x (CPU) | vlmdata x (wall) |",
        "|---|---|---|---|---|",
    ]
    vs = {}
    for name, row in s["contenders"].items():
        c, w = spread(result.ratios("vlmdata", name)), spread(result.ratios("vlmdata", name, "wall"))
        vs[name] = {"cpu": c, "wall": w}
        pc, pw = row["per_cpu_s"], row["per_wall_s"]
        lines.append(
            f"| {name} | {pc['median']:.0f} ({pc['min']:.0f}-{pc['max']:.0f}) | "
            f"{pw['median']:.0f} ({pw['min']:.0f}-{pw['max']:.0f}) | "
            f"{c['median']:.2f}x ({c['min']:.2f}-{c['max']:.2f}) | {w['median']:.2f}x ({w['min']:.2f}-{w['max']:.2f}) |"
        )
    ls, le = s["load_average_start"], s["load_average_end"]
    foot = (
        f"{s['rounds']} interleaved rounds (+{s['warmup_rounds']} warm-up); load average {ls[0]:.2f} at start, "
        f"{le[0]:.2f} at end; {os.cpu_count()} cores"
    )
    lines += ["", foot]
    s["vlmdata_vs"] = vs
    return "\n".join(lines), s


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--samples", type=int, default=2000, help="input samples (default 2000)")
    ap.add_argument("--rounds", type=int, default=5, help="timed rounds (default 5)")
    ap.add_argument("--warmup", type=int, default=1, help="untimed rounds first (default 1)")
    ap.add_argument("--decode", action="store_true", help="also time reading with a Pillow decode of every image")
    ap.add_argument("--tmp", default=None, help="folder for input and outputs (default: the system temp)")
    ap.add_argument("--json", default=None, help="also write every figure to this JSON file")
    args = ap.parse_args()
    import torch  # the peers' readers import torch: one thread each, as vlmdata's loader benchmark

    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory(dir=args.tmp, prefix="vlmdata-peers-") as tmp:
        jsonl = make_photo_input(os.path.join(tmp, "input"), args.samples)
        recs = records(jsonl)
        nbytes = sum(os.path.getsize(p) for _, ps in recs for p in ps)
        head = (
            f"input: {len(recs)} samples, {sum(len(ps) for _, ps in recs)} images, {nbytes / 1e6:.1f} MB of JPEG; "
            f"python {sys.version.split()[0]}"
        )
        print(head, flush=True)
        wcs, outs, notes = writers(jsonl, recs, tmp)
        wres = interleave(wcs, rounds=args.rounds, warmup=args.warmup)
        wtab, wsum = table(wres, "write: samples per CPU-second")
        print(wtab + "\n", flush=True)
        names = [c.name for c in wcs]
        rres = interleave(readers(outs, names, len(recs), False), rounds=args.rounds, warmup=args.warmup)
        rtab, rsum = table(rres, "read (bytes of image + text, no decode): samples per CPU-second")
        print(rtab + "\n", flush=True)
        out = {"input": head, "notes": notes, "write": wsum, "read": rsum}
        if args.decode:
            dres = interleave(readers(outs, names, len(recs), True), rounds=args.rounds, warmup=args.warmup)
            dtab, out["read_decode"] = table(dres, "read + Pillow decode of every image: samples per CPU-second")
            print(dtab + "\n", flush=True)
    for n in notes:
        print(f"note: {n}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
