"""Build the same input with ``--engine local --workers W`` and ``--engine ray`` (W CPUs), in one run.

Prints samples/s of each and the ratio, checks that the shards are byte-identical, measures the
per-core rate (local, one worker) and the Energon indexing rate, and turns them into a paper
estimate of the time to build 100M samples on N nodes.

    python bench/build_engines.py                     # 3,000 photo samples, W = 2
    python bench/build_engines.py --samples 10000 --nodes 1,8,32 --cores-per-node 64
"""

from __future__ import annotations

import argparse
import filecmp
import io
import os
import shutil
import sys
import tempfile
import time


def make_input(root: str, n: int, seed: int = 0) -> int:
    """A folder of n JPEG photos (COCO-like sizes, 320..640 px) with caption sidecars; returns total bytes."""
    import numpy as np
    import skimage.data
    from PIL import Image

    rng = np.random.default_rng(seed)
    bases = [
        Image.fromarray(getattr(skimage.data, k)()).convert("RGB") for k in ("chelsea", "coffee", "astronaut", "rocket")
    ]
    os.makedirs(root, exist_ok=True)
    total = 0
    for i in range(n):
        w, h = int(rng.integers(320, 641)), int(rng.integers(240, 481))
        buf = io.BytesIO()
        bases[i % 4].resize((w, h)).save(buf, "JPEG", quality=int(rng.integers(75, 95)))
        d = os.path.join(root, f"{i // 1000:03d}")
        os.makedirs(d, exist_ok=True)
        with open(os.path.join(d, f"{i:07d}.jpg"), "wb") as f:
            f.write(buf.getvalue())
        with open(os.path.join(d, f"{i:07d}.txt"), "w") as f:
            f.write(f"Photo number {i}, a {w}x{h} picture.")
        total += buf.tell()
    return total


def timed_build(src: str, out: str, workers: int, engine: str, energon: bool = False) -> tuple[float, dict]:
    from vlmdata.ingest import BuildOptions, build

    shutil.rmtree(out, ignore_errors=True)
    t = time.perf_counter()
    m = build(src, out, BuildOptions(max_count=500, workers=workers), engine=engine, energon=energon)
    return time.perf_counter() - t, m


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--samples", type=int, default=3000)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--nodes", default="1,4,16,64")
    ap.add_argument("--cores-per-node", type=int, default=32)
    ap.add_argument("--target", type=float, default=100e6, help="samples to estimate for")
    ap.add_argument("--tmp", default=None)
    args = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="vlmdata-bench-", dir=args.tmp)
    try:
        src = os.path.join(tmp, "src")
        t = time.perf_counter()
        nbytes = make_input(src, args.samples)
        print(
            f"input: {args.samples} JPEG photos + captions, {nbytes / 1e6:.0f} MB, made in {time.perf_counter() - t:.1f}s; "
            f"{os.cpu_count()} cores; shards of 500 samples; Energon indexing timed separately"
        )
        n = args.samples
        t1, m1 = timed_build(src, os.path.join(tmp, "w1"), 1, "local")
        tl, ml = timed_build(src, os.path.join(tmp, "local"), args.workers, "local")
        import ray

        t = time.perf_counter()
        ray.init(num_cpus=args.workers, include_dashboard=False, log_to_driver=False, logging_level="WARNING")
        t_init = time.perf_counter() - t
        tr, mr = timed_build(src, os.path.join(tmp, "ray"), args.workers, "ray")  # uses the running instance
        ray.shutdown()
        same = (
            all(
                filecmp.cmp(os.path.join(tmp, "local", s["name"]), os.path.join(tmp, "ray", s["name"]), shallow=False)
                for s in ml["shards"]
            )
            and ml["shards"] == mr["shards"]
            and ml["shards"] == m1["shards"]
        )
        from vlmdata.dataset.nvmeta import prepare_energon

        t = time.perf_counter()
        prepare_energon(os.path.join(tmp, "local"), [s["name"] for s in ml["shards"]], workers=args.workers)
        t_idx = time.perf_counter() - t
        print(f"{'engine':<28}{'seconds':>9}{'samples/s':>11}")
        print(f"{'local --workers 1':<28}{t1:>9.2f}{n / t1:>11.0f}")
        print(f"{f'local --workers {args.workers}':<28}{tl:>9.2f}{n / tl:>11.0f}")
        print(f"{f'ray ({args.workers} CPUs, warm)':<28}{tr:>9.2f}{n / tr:>11.0f}")
        print(f"{'ray incl. ray.init':<28}{tr + t_init:>9.2f}{n / (tr + t_init):>11.0f}   (ray.init {t_init:.1f}s)")
        print(f"{'energon index (W workers)':<28}{t_idx:>9.2f}{n / t_idx:>11.0f}")
        print(
            f"ratio ray/local samples/s: {tl / tr:.2f} (warm), {tl / (tr + t_init):.2f} (with ray.init); "
            f"byte-identical shards: {same}"
        )
        per_core = n / t1
        eff = (n / tr) / (per_core * args.workers)
        print(
            f"\npaper estimate, {args.target / 1e6:.0f}M samples like these, {args.cores_per_node} cores/node, "
            f"per-core rate {per_core:.0f}/s, Ray efficiency {eff:.2f} of linear (measured here):"
        )
        print(f"{'nodes':>6}{'build (Ray tasks)':>20}{'+ energon index (1 node)':>26}")
        for nodes in [int(x) for x in args.nodes.split(",")]:
            rate = per_core * eff * args.cores_per_node * nodes
            t_build = args.target / rate
            t_index = args.target / ((n / t_idx) / args.workers * args.cores_per_node)
            print(f"{nodes:>6}{t_build / 3600:>19.2f}h{t_index / 3600:>25.2f}h")
        print(
            "(assumes storage bandwidth scales with nodes: "
            f"{nbytes / n * per_core * eff * args.cores_per_node / 1e6:.0f} MB/s per node of reads and as much of writes)"
        )
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
