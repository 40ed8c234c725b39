"""Why the CPU demo's synthetic verdict moves on a 2-core host: repeated default audits, interleaved with and
without a competing process, and where synthetic's deviation from real sits (stage by stage, per sample).

    python bench/cpu_demo_proxy.py --runs 3 --out /tmp/proxy          # 3 quiet + 3 loaded runs, interleaved
    python bench/cpu_demo_proxy.py --analyze /tmp/proxy/*/report.json   # the table only
    python bench/cpu_demo_proxy.py --host /tmp/proxy/run-1-quiet/synthetic-twin   # the twin's host cost alone

Each run is the bare ``vlmdata audit`` (the embedded sample data, tiny preset, CPU) with ``-o``; a *loaded*
run has a second process spinning on one core in bursts (1.5 s on, 1.5 s off: another job on a shared host).
Runs alternate quiet / loaded so that drift falls on both. For each run the table gives the load average
before and after, synthetic's samples/s ratio to real with its interval and state, and synthetic minus real
per sample for each stage (ms): data wait (decode + preprocess of the images in the main process, since the
CPU demo has no loader workers), vision, backward, the rest. Deviations that sit in compute stages whose
inputs are identical (the twin has the same shapes and token ids, so the same FLOPs) are host noise, not a
difference of the data.

``--host TWIN``: the twin's host-side cost without training, interleaved: (1) decode + Qwen3-VL preprocess
of every real sample's images and its twin's, alternately, 5 rounds, the fastest thread-CPU time of each;
(2) the loader alone (seq 2048, micro-batch 2, no workers), real and twin batch by batch alternately,
4 rounds, wall time per sample.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
STAGES = ("data_wait", "prep", "vision", "lm_forward", "lm_head_loss", "backward", "optimizer")


def spinner(stop_after: float) -> subprocess.Popen:
    code = (
        "import time\n"
        f"end = time.time() + {stop_after}\n"
        "while time.time() < end:\n"
        "    t = time.time()\n"
        "    while time.time() - t < 1.5: pass\n"
        "    time.sleep(1.5)\n"
    )
    return subprocess.Popen([sys.executable, "-c", code])


def one_run(out: str, loaded: bool) -> dict:
    env = {**os.environ, "PYTHONPATH": REPO + os.pathsep + os.environ.get("PYTHONPATH", "")}
    before = os.getloadavg()
    spin = spinner(400) if loaded else None
    t0 = time.perf_counter()
    try:
        r = subprocess.run(
            [sys.executable, "-m", "vlmdata", "audit", "-o", out, "-q"], env=env, capture_output=True, text=True
        )
    finally:
        if spin is not None:
            spin.kill()
            spin.wait()
    return {
        "out": out,
        "loaded": loaded,
        "code": r.returncode,
        "seconds": time.perf_counter() - t0,
        "load_before": before,
        "load_after": os.getloadavg(),
    }


def analyze(report_path: str, meta: dict | None = None) -> dict:
    with open(report_path) as f:
        rep = json.load(f)
    v = rep["verdict"]
    g = v["gaps"]["synthetic"]["samples_per_s"]
    syn = rep["sources"]["synthetic"]["summary"]["stages_ms_per_sample"]
    real = rep["sources"]["real"]["summary"]["stages_ms_per_sample"]
    diff = {k: syn.get(k, 0.0) - real.get(k, 0.0) for k in STAGES}
    rest = sum(syn.values()) - sum(real.values()) - sum(diff.values())
    recs_s = rep["sources"]["synthetic"]["records"]
    recs_r = rep["sources"]["real"]["records"]
    per_step = sorted(a["step_ms"] / b["step_ms"] for a, b in zip(recs_s, recs_r))
    return {
        "report": report_path,
        "loaded": (meta or {}).get("loaded"),
        "load": (meta or {}).get("load_before", rep["environment"].get("load_average")),
        "load_end": (meta or {}).get("load_after", rep["measurement"].get("load_average_end")),
        "ratio": g["ratio"],
        "lo": g["lo"],
        "hi": g["hi"],
        "state": (v.get("synthetic_proxy") or {}).get("state"),
        "status": v["status"],
        "diff_ms_per_sample": {**diff, "rest": rest},
        "real_ms_per_sample": sum(real.values()),
        "per_step_ratio_p10_p50_p90": [
            per_step[len(per_step) // 10],
            per_step[len(per_step) // 2],
            per_step[-len(per_step) // 10],
        ],
    }


def table(rows: list[dict]) -> str:
    head = (
        "| run | load (1 min) before / after | synthetic/real samples/s [95%] | state | "
        + " | ".join(f"Δ {k}" for k in (*STAGES, "rest"))
        + " | per-step ratio p10/p50/p90 |"
    )
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    for i, r in enumerate(rows):
        lb, la = r["load"], r["load_end"]
        lines.append(
            f"| {i + 1}{' loaded' if r['loaded'] else ' quiet' if r['loaded'] is not None else ''} | "
            f"{lb[0]:.2f} / {la[0]:.2f} | {r['ratio']:.3f} [{r['lo']:.3f}, {r['hi']:.3f}] | {r['state']} | "
            + " | ".join(f"{r['diff_ms_per_sample'][k]:+.1f}" for k in (*STAGES, "rest"))
            + " | "
            + "/".join(f"{x:.2f}" for x in r["per_step_ratio_p10_p50_p90"])
            + " |"
        )
    return "\n".join(lines)


def host_cost(twin: str) -> None:
    import logging
    import statistics

    import vlmdata
    from vlmdata.dataset.manifest import shard_paths
    from vlmdata.dataset.schema import loads
    from vlmdata.dataset.tar import iter_shard
    from vlmdata.loaders.api import make_loader
    from vlmdata.loaders.options import LoaderOptions
    from vlmdata.loaders.pixel_rows import batch_pixels, preprocess_rows
    from vlmdata.qwen.spec import BRIDGE_MAX_PIXELS, BRIDGE_MIN_PIXELS, get_spec

    logging.disable(logging.WARNING)
    spec = get_spec("qwen3-vl")

    def images(root):
        out = {}
        for p in shard_paths(root):
            for smp in iter_shard(p):
                meta = loads(smp.files["json"])
                out[smp.key] = [smp.files[i["file"]] for i in meta.get("images") or []]
        return out

    real, tw = images(vlmdata.sample_data_path()), images(twin)
    keys = [k for k in real if real[k] and len(tw.get(k, [])) == len(real[k])]

    def cost(imgs):
        t = time.thread_time()
        rows = [preprocess_rows(b, spec, BRIDGE_MIN_PIXELS, BRIDGE_MAX_PIXELS, "bridge", False) for b in imgs]
        batch_pixels([r for r, _ in rows], spec.patch_dim)
        return time.thread_time() - t

    print("load average", os.getloadavg())
    best = {k: [1e9, 1e9] for k in keys}
    for rnd in range(5):
        for i, k in enumerate(keys):
            for o in (0, 1) if (i + rnd) % 2 == 0 else (1, 0):
                best[k][o] = min(best[k][o], cost(real[k] if o == 0 else tw[k]))
    r, t = sum(v[0] for v in best.values()), sum(v[1] for v in best.values())
    print(
        f"decode+preprocess, {len(keys)} samples: real {r / len(keys) * 1e3:.2f} ms/sample, twin "
        f"{t / len(keys) * 1e3:.2f} ms/sample, twin/real {t / r:.3f}"
    )
    o = LoaderOptions(seq_length=2048, micro_batch_size=2, num_epochs=None, seed=0)
    ratios = []
    for rnd in range(4):
        its = {
            "real": make_loader(vlmdata.sample_data_path(), o).iter_inline(),
            "twin": make_loader(twin, o).iter_inline(),
        }
        acc = {"real": 0.0, "twin": 0.0}
        for step in range(45):
            for name in ("real", "twin") if (step + rnd) % 2 == 0 else ("twin", "real"):
                t0 = time.perf_counter()
                next(its[name])
                acc[name] += time.perf_counter() - t0
        ratios.append(acc["twin"] / acc["real"])
        print(
            f"loader round {rnd}: real {acc['real'] / 90 * 1e3:.2f} ms/sample, twin {acc['twin'] / 90 * 1e3:.2f}, "
            f"twin/real {ratios[-1]:.3f}"
        )
    print(f"loader twin/real median of rounds {statistics.median(ratios):.3f}; load average {os.getloadavg()}")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=3, help="quiet and loaded runs each (interleaved)")
    ap.add_argument("--out", default="/tmp/vlmdata-proxy")
    ap.add_argument("--analyze", nargs="*", help="report.json files to tabulate (no runs)")
    ap.add_argument("--json", help="write the rows here")
    ap.add_argument("--host", metavar="TWIN", help="measure the twin's host-side cost only (no audit runs)")
    args = ap.parse_args(argv)
    if args.host:
        host_cost(args.host)
        return 0
    rows = []
    if args.analyze:
        rows = [analyze(p) for p in args.analyze]
    else:
        for i in range(args.runs):
            for loaded in (False, True):
                out = os.path.join(args.out, f"run-{i + 1}-{'loaded' if loaded else 'quiet'}")
                meta = one_run(out, loaded)
                rows.append(analyze(os.path.join(out, "report.json"), meta))
                print(
                    json.dumps({k: rows[-1][k] for k in ("loaded", "load", "ratio", "lo", "hi", "state")}), flush=True
                )
    print(table(rows))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
