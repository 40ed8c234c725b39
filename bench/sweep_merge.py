"""Merge sweep reports run in parts (e.g. one per GPU) into one decision report.

    python bench/sweep_merge.py PART_DIR [PART_DIR ...] -o OUT [--threshold 0.1] [--memory-limit-gb 80]

Each part is a ``vlmdata audit --sweep ...`` output folder (report.json); the configurations are
concatenated in order and the decisions (best sets, Kendall tau, regret), the knob effects, the fit per GPU
card and the verdict are computed over all of them, as one sweep would (``sweep.decide_sweep``).
"""

from __future__ import annotations

import argparse
import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
from vlmdata.audit.analysis.cards import memory_limit  # noqa: E402
from vlmdata.audit.phases.sweep import decide_sweep  # noqa: E402
from vlmdata.audit.report import write_report  # noqa: E402
from vlmdata.errors import VlmdataError  # noqa: E402


def _limit(text: str) -> float:
    try:
        return memory_limit(text)
    except VlmdataError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("parts", nargs="+", help="sweep output folders (each with report.json)")
    ap.add_argument("-o", "--out", required=True, help="folder for the merged report.json/md/html")
    ap.add_argument("--threshold", type=float, help="default: the first part's")
    ap.add_argument("--memory-limit-gb", type=_limit, help="GB or a card (h100, h200, b200); default: the first part's")
    args = ap.parse_args(argv)
    parts = [json.load(open(os.path.join(p, "report.json"))) for p in args.parts]
    first = parts[0]
    configs = [c for p in parts for c in p["configs"]]
    threshold = args.threshold if args.threshold is not None else first["decisions"]["threshold"]
    limit = args.memory_limit_gb if args.memory_limit_gb is not None else first["decisions"]["memory_limit_gb"]
    seed = (first.get("config") or {}).get("seed") or 0
    decided = decide_sweep(configs, threshold=threshold, memory_limit_gb=limit, seed=seed)
    sweep = {}
    for p in parts:
        for k, v in p["sweep"].items():
            sweep.setdefault(k, [])
            sweep[k] += [x for x in v if x not in sweep[k]]
    merged = {
        **first,
        "sweep": sweep,
        "configs": configs,
        **decided,
        "parts": list(args.parts),
    }
    paths = write_report(merged, args.out)
    print(merged["verdict"]["line"])
    print("report:", ", ".join(paths.values()))
    return {"MISLEADING": 3, "UNDECIDED": 4}.get(merged["verdict"]["status"], 0)


if __name__ == "__main__":
    sys.exit(main())
