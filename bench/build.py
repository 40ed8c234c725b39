"""Benchmark: ``vlmdata build`` against a plain ``webdataset.ShardWriter`` loop, same input, same run.

    python bench/build.py [--samples 2000] [--workers 2] [--repeat 3]

The input is a LLaVA JSONL over COCO-like JPEGs made from the offline photos (vlmdata.sources.photos).
Both sides read every image file and caption and write tar shards of <= --max-count samples without
re-encoding ("pack mode"); vlmdata also checks every image header and end marker, hashes every
shard, and writes the manifest. Energon indexing (.nv-meta) is timed separately. Prints samples/s
and MB/s of each and the ratio (best of --repeat runs each, interleaved).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time


def plain_loop(jsonl: str, out: str, args_maxcount: int = 1000) -> int:
    """What people write by hand: webdataset.ShardWriter, one process."""
    import webdataset as wds

    os.makedirs(out, exist_ok=True)
    root = os.path.dirname(jsonl)
    n = 0
    with wds.ShardWriter(
        os.path.join(out, "shard-%06d.tar"), maxcount=args_maxcount, maxsize=512 * 1024 * 1024, verbose=0
    ) as sink:
        with open(jsonl) as f:
            for i, line in enumerate(f):
                rec = json.loads(line)
                images = rec["image"] if isinstance(rec["image"], list) else [rec["image"]]
                sample = {"__key__": f"s{i:09d}", "json": json.dumps(rec).encode()}
                try:
                    for j, rel in enumerate(images):
                        with open(os.path.join(root, rel), "rb") as im:
                            sample[f"{j}.jpg"] = im.read()
                except OSError:
                    continue
                sink.write(sample)
                n += 1
    return n


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--samples", type=int, default=2000)
    ap.add_argument("--workers", type=int, default=os.cpu_count() or 2)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument(
        "--max-count", type=int, default=250, help="samples per shard, both sides (default 250: ~25 MB shards)"
    )
    ap.add_argument(
        "--tmp",
        default=None,
        help="folder for input and outputs (default: the system temp; /dev/shm takes the disk out)",
    )
    ap.add_argument(
        "--fsync", action="store_true", help="vlmdata flushes every shard to disk (the plain loop never does)"
    )
    args = ap.parse_args()
    from vlmdata.build.builder import BuildOptions, build
    from vlmdata.sources.photos import make_source

    with tempfile.TemporaryDirectory(dir=args.tmp) as tmp:
        src = os.path.join(tmp, "src")
        n_multi = args.samples // 10
        jsonl = make_source(src, n_single=args.samples - n_multi, n_multi=n_multi)
        with open(jsonl) as f:
            lines = [line for line in f if "bad-" not in line]
        with open(jsonl, "w") as f:
            f.writelines(lines)
        nbytes = sum(os.path.getsize(os.path.join(src, "images", p)) for p in os.listdir(os.path.join(src, "images")))
        os.system("sync")
        best = {"plain": 1e9, "vlmdata": 1e9, "energon": 1e9}
        counts = {}
        for _ in range(args.repeat):
            out = os.path.join(tmp, "plain")
            t = time.perf_counter()
            counts["plain"] = plain_loop(jsonl, out, args.max_count)
            best["plain"] = min(best["plain"], time.perf_counter() - t)
            shutil.rmtree(out)
            out = os.path.join(tmp, "vl")
            t = time.perf_counter()
            m = build(
                jsonl,
                out,
                BuildOptions(max_count=args.max_count, workers=args.workers, fsync=args.fsync),
                energon=False,
            )
            best["vlmdata"] = min(best["vlmdata"], time.perf_counter() - t)
            counts["vlmdata"] = m["accounting"]["written"]
            from vlmdata.dataset.nvmeta import prepare_energon

            t = time.perf_counter()
            prepare_energon(out, [s["name"] for s in m["shards"]], workers=args.workers)
            best["energon"] = min(best["energon"], time.perf_counter() - t)
            shutil.rmtree(out)
    assert counts["plain"] == counts["vlmdata"], counts
    n, mb = counts["plain"], nbytes / 1e6
    rows = [
        ("plain webdataset.ShardWriter loop (1 process)", best["plain"]),
        (f"vlmdata build --workers {args.workers}", best["vlmdata"]),
        ("vlmdata build + energon index", best["vlmdata"] + best["energon"]),
    ]
    print(f"input: {n} samples, {mb:.1f} MB of JPEG, {os.cpu_count()} cores, python {sys.version.split()[0]}")
    print(f"{'':48s} {'s':>7s} {'samples/s':>10s} {'MB/s':>8s} {'ratio':>6s}")
    for name, sec in rows:
        print(f"{name:48s} {sec:7.2f} {n / sec:10.0f} {mb / sec:8.1f} {best['plain'] / sec:6.2f}x")


if __name__ == "__main__":
    main()
