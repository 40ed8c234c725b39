"""Why the CPU demo's synthetic verdict moves on a 2-core host: repeated default audits, interleaved with and
without a competing process, and where synthetic's deviation from real sits (stage by stage, per sample).

    python bench/cpu_demo_proxy.py --runs 3 --out /tmp/proxy          # 3 quiet + 3 loaded runs, interleaved
    python bench/cpu_demo_proxy.py --analyze /tmp/proxy/*/report.json   # the table only

Each run is the bare ``vlmdata audit`` (the embedded sample data, tiny preset, CPU) with ``-o``; a *loaded*
run has a second process spinning on one core in bursts (1.5 s on, 1.5 s off: another job on a shared host).
Runs alternate quiet / loaded so that drift falls on both. For each run the table gives the load average
before and after, synthetic's samples/s ratio to real with its interval and state, and synthetic minus real
per sample for each stage (ms): data wait (decode + preprocess of the images in the main process, since the
CPU demo has no loader workers), vision, backward, the rest. Deviations that sit in compute stages whose
inputs are identical (the twin has the same shapes and token ids, so the same FLOPs) are host noise, not a
difference of the data.
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


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=3, help="quiet and loaded runs each (interleaved)")
    ap.add_argument("--out", default="/tmp/vlmdata-proxy")
    ap.add_argument("--analyze", nargs="*", help="report.json files to tabulate (no runs)")
    ap.add_argument("--json", help="write the rows here")
    args = ap.parse_args(argv)
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
