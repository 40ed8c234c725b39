"""Benchmark: the whole ``vlmdata build`` command against a plain script, interleaved rounds.

    python bench/build_vs_plain.py [--samples 2000] [--rounds 6] [--max-count 250] [--workers N] [--json FILE]

Both contenders run as subprocesses on the same input (a LLaVA JSONL over COCO-like JPEGs made from the
offline photos, ``vlmdata.sources.photos``; or ``--src FILE.jsonl``) and produce the same thing: tar shards of at
most ``--max-count`` samples with the original image bytes, plus the Energon index.

- ``vlmdata``: ``python -m vlmdata build SRC -o OUT --max-count N`` (its default process policy unless
  ``--workers``); it also checks every image, hashes every shard and writes the manifest.
- ``plain``: what people write by hand: a ``webdataset.ShardWriter`` loop (one process), then
  ``energon prepare OUT --non-interactive --split-parts train:.* --split-parts val:.* --num-workers W``,
  W = the number of processes vlmdata used (read back from its manifest), so both sides use as many.

Rounds alternate the order (vlmdata first, then plain first, ...), after one untimed warm-up run of each.
Per round: wall seconds and CPU seconds (user + system of the finished children, ``RUSAGE_CHILDREN``) of
each side, and the ratios plain / vlmdata (above 1: vlmdata is faster). The plain side's two steps are
also reported apart. Prints min / median / max, and the 1-minute load average at start and end.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

from vlmdata.benchmarks.build import PLAIN_SCRIPT  # the one hand-written baseline (also `vlmdata bench build`)


def timed(cmd: list[str], env: dict) -> tuple[float, float]:
    """(wall s, CPU s of the child) of one subprocess run to completion."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t = time.perf_counter()
    subprocess.run(cmd, check=True, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    wall = time.perf_counter() - t
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def energon_exe() -> str:
    exe = os.path.join(os.path.dirname(sys.executable), "energon")
    return exe if os.path.exists(exe) else shutil.which("energon") or "energon"


def make_input(tmp: str, samples: int) -> str:
    from vlmdata.sources.photos import make_source

    n_multi = samples // 10
    jsonl = make_source(os.path.join(tmp, "src"), n_single=samples - n_multi, n_multi=n_multi)
    with open(jsonl) as f:
        lines = [line for line in f if "bad-" not in line]
    with open(jsonl, "w") as f:
        f.writelines(lines)
    return jsonl


def run_vlmdata(src: str, out: str, args, env: dict) -> tuple[dict, int, int]:
    shutil.rmtree(out, ignore_errors=True)
    cmd = [sys.executable, "-m", "vlmdata", "build", src, "-o", out, "--max-count", str(args.max_count), "-q", "--json"]
    if args.workers:
        cmd += ["--workers", str(args.workers)]
    wall, cpu = timed(cmd, env)
    with open(os.path.join(out, "manifest.json")) as f:
        m = json.load(f)
    return {"wall": wall, "cpu": cpu}, m["accounting"]["written"], m["options"]["workers"]


def run_plain(src: str, out: str, args, env: dict, workers: int) -> tuple[dict, int]:
    shutil.rmtree(out, ignore_errors=True)
    w1, c1 = timed([sys.executable, "-c", PLAIN_SCRIPT, src, out, str(args.max_count)], env)
    w2, c2 = timed(
        [
            energon_exe(),
            "prepare",
            out,
            "--non-interactive",
            "--split-parts",
            "train:.*",
            "--split-parts",
            "val:.*",
            "--num-workers",
            str(workers),
            "--no-progress",
        ],
        env,
    )
    with open(os.path.join(out, ".nv-meta", ".info.json")) as f:
        n = sum(json.load(f)["shard_counts"].values())
    return {"wall": w1 + w2, "cpu": c1 + c2, "loop_wall": w1, "loop_cpu": c1, "prepare_wall": w2, "prepare_cpu": c2}, n


def summary(xs: list[float]) -> dict:
    return {"min": min(xs), "median": statistics.median(xs), "max": max(xs)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--samples", type=int, default=2000, help="samples of the generated input (default 2000)")
    ap.add_argument("--src", help="an existing LLaVA JSONL instead of the generated input")
    ap.add_argument("--rounds", type=int, default=6, help="timed rounds (default 6, at least 5 recommended)")
    ap.add_argument("--max-count", type=int, default=250, help="samples per shard, both sides (default 250)")
    ap.add_argument("--workers", type=int, default=None, help="vlmdata --workers (default: its own policy)")
    ap.add_argument("--tmp", default=None, help="folder for input and outputs (default: the system temp)")
    ap.add_argument("--json", metavar="FILE", help="also write the results as JSON to FILE ('-': stdout only)")
    args = ap.parse_args()
    env = dict(os.environ)
    with tempfile.TemporaryDirectory(dir=args.tmp) as tmp:
        src = args.src or make_input(tmp, args.samples)
        out_v, out_p = os.path.join(tmp, "out-vlmdata"), os.path.join(tmp, "out-plain")
        load_start = os.getloadavg()
        _, n_v, workers = run_vlmdata(src, out_v, args, env)  # warm-up: page cache, .pyc files
        _, n_p = run_plain(src, out_p, args, env, workers)
        if n_v != n_p:
            raise SystemExit(f"the two sides wrote different sample counts: vlmdata {n_v}, plain {n_p}")
        rounds = []
        for r in range(args.rounds):
            got = {}
            for side in ("vlmdata", "plain") if r % 2 == 0 else ("plain", "vlmdata"):
                if side == "vlmdata":
                    got[side], _, workers = run_vlmdata(src, out_v, args, env)
                else:
                    got[side], _ = run_plain(src, out_p, args, env, workers)
            v, p = got["vlmdata"], got["plain"]
            rounds.append(
                {
                    "order": list(got),
                    "vlmdata": v,
                    "plain": p,
                    "wall_ratio": p["wall"] / v["wall"],
                    "cpu_ratio": p["cpu"] / v["cpu"],
                    "wall_ratio_loop_only": p["loop_wall"] / v["wall"],
                    "cpu_ratio_loop_only": p["loop_cpu"] / v["cpu"],
                }
            )
        load_end = os.getloadavg()
    res = {
        "samples": n_v,
        "max_count": args.max_count,
        "workers": workers,
        "rounds": rounds,
        "cores": os.cpu_count(),
        "python": sys.version.split()[0],
        "load_start": [round(x, 2) for x in load_start],
        "load_end": [round(x, 2) for x in load_end],
        **{
            k: summary([r[k] for r in rounds])
            for k in ("wall_ratio", "cpu_ratio", "wall_ratio_loop_only", "cpu_ratio_loop_only")
        },
        "vlmdata_wall": summary([r["vlmdata"]["wall"] for r in rounds]),
        "vlmdata_cpu": summary([r["vlmdata"]["cpu"] for r in rounds]),
        "plain_wall": summary([r["plain"]["wall"] for r in rounds]),
        "plain_cpu": summary([r["plain"]["cpu"] for r in rounds]),
        "plain_loop_cpu": summary([r["plain"]["loop_cpu"] for r in rounds]),
        "plain_prepare_cpu": summary([r["plain"]["prepare_cpu"] for r in rounds]),
    }
    print(
        f"input: {n_v} samples, shards of {args.max_count}; vlmdata used {workers} process(es), energon prepare "
        f"--num-workers {workers}; {os.cpu_count()} cores; load {res['load_start'][0]} -> {res['load_end'][0]}"
    )
    print(
        f"{'round':>5} {'order':>15} {'vlm wall':>8} {'vlm cpu':>8} {'plain wall':>10} {'plain cpu':>9} "
        f"{'wall x':>7} {'cpu x':>6}"
    )
    for i, r in enumerate(rounds):
        print(
            f"{i:5d} {'>'.join(x[0] for x in r['order']):>15} {r['vlmdata']['wall']:8.2f} {r['vlmdata']['cpu']:8.2f} "
            f"{r['plain']['wall']:10.2f} {r['plain']['cpu']:9.2f} {r['wall_ratio']:7.2f} {r['cpu_ratio']:6.2f}"
        )
    for k in ("wall_ratio", "cpu_ratio", "wall_ratio_loop_only", "cpu_ratio_loop_only"):
        s = res[k]
        print(f"{k:22s} min {s['min']:.2f}  median {s['median']:.2f}  max {s['max']:.2f}")
    if args.json:
        text = json.dumps(res, indent=1)
        if args.json == "-":
            print(text)
        else:
            with open(args.json, "w") as f:
                f.write(text + "\n")


if __name__ == "__main__":
    main()
