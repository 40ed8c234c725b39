"""Spread of audit ratios across repeated runs (the evidence for docs/RESULTS.md).

    python bench/audit_spread.py RUN_DIR [RUN_DIR ...]        # each holds a report.json
    python bench/audit_spread.py --json OUT.json RUN_DIR ...

Runs are grouped by configuration (everything in the report's config except the source order and the
output folder); for each group and each gap (source/real x metric) it prints every run's ratio and the
min/median/max with the largest deviation from the median, plus each run's verdict, step counts,
first-seen shapes inside timed steps and real data wait (steady and epoch boundaries).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys

IGNORED = {"sources", "real", "max_steps"}


def load(path: str) -> dict:
    with open(os.path.join(path, "report.json") if os.path.isdir(path) else path) as f:
        rep = json.load(f)
    rep["_path"] = path
    return rep


def group_key(rep: dict) -> str:
    c = rep["config"]
    keep = {k: v for k, v in sorted(c.items()) if k not in IGNORED and not isinstance(v, (list, dict))}
    keep["loader_options"] = c.get("loader_options")
    keep["world_size"] = rep.get("world_size", 1)
    return json.dumps(keep, sort_keys=True)


def describe(rep: dict) -> dict:
    v = rep["verdict"]
    real = rep["sources"]["real"]["summary"]
    dw = real.get("data_wait") or {}
    return {
        "path": rep["_path"],
        "order": rep["config"]["sources"],
        "status": v["status"],
        "offenders": sorted({o["source"] for o in v["offenders"]}),
        "steps": rep["measurement"]["steps_per_source"],
        "stop": rep["measurement"]["stop"],
        "first_seen": {n: s["summary"].get("first_seen_shapes") for n, s in rep["sources"].items()},
        "real_wait_fraction": real.get("data_wait_fraction"),
        "real_wait_steady": (dw.get("steady") or {}).get("fraction"),
        "real_wait_epoch_ms": (dw.get("epoch_boundary") or {}).get("ms"),
        "ratios": {f"{s}/{m}": ci["ratio"] for s, g in v["gaps"].items() for m, ci in g.items() if ci},
    }


def spread(runs: list[dict]) -> dict:
    out = {}
    for key in sorted({k for r in runs for k in r["ratios"]}):
        vals = [r["ratios"][key] for r in runs if key in r["ratios"]]
        med = statistics.median(vals)
        out[key] = {
            "values": vals,
            "min": min(vals),
            "median": med,
            "max": max(vals),
            "max_dev": max(abs(v / med - 1) for v in vals),
        }
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("runs", nargs="+", help="run folders (with report.json) or report.json files")
    ap.add_argument("--json", help="write the grouped figures here")
    args = ap.parse_args(argv)
    reps = []
    for p in args.runs:
        try:
            reps.append(load(p))
        except (OSError, ValueError, KeyError) as e:
            print(f"skip {p}: {e}", file=sys.stderr)
    groups: dict[str, list] = {}
    for rep in reps:
        groups.setdefault(group_key(rep), []).append(describe(rep))
    result = []
    for key, runs in groups.items():
        sp = spread(runs)
        result.append({"config": json.loads(key), "runs": runs, "spread": sp})
        c = json.loads(key)
        print(
            f"\n== {c.get('preset')} seq {c.get('seq_length')} mbs {c.get('micro_batch_size')} "
            f"{c.get('loader_options')} world {c.get('world_size')}: {len(runs)} runs"
        )
        for r in runs:
            print(
                f"  {os.path.basename(os.path.normpath(r['path']))}: {r['status']} {r['offenders']} steps {r['steps']} "
                f"({r['stop']}), first-seen {r['first_seen']}, real wait {r['real_wait_fraction']:.2%} "
                f"(steady {r['real_wait_steady'] or 0:.2%}, epoch boundaries {r['real_wait_epoch_ms'] or 0:.0f} ms)"
            )
        for k, s in sp.items():
            print(
                f"  {k:40s} min {s['min']:.3f}  median {s['median']:.3f}  max {s['max']:.3f}  "
                f"max dev {s['max_dev']:.1%}  [{', '.join(f'{v:.3f}' for v in s['values'])}]"
            )
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
