"""The benchmark-against-run figures of several audit reports, one block per report and a spread table over them:
``python3 bench/benchmark_summary.py DIR/*/report.json``.

Per report: the per-GPU headline (benchmark mock / real run, samples/s with its interval), every factor with its
interval, the product, the interaction, the verdict's status and the load average. Then, per (model, mock): min /
median / max of the headline and of every factor over the reports, and the largest deviation from the median (the
issue's goal: within +-5%)."""

from __future__ import annotations

import json
import statistics
import sys
from collections import defaultdict


def _fmt(f: dict) -> str:
    if f.get("ratio") is None:
        return "-"
    if f.get("lo") is None:
        return f"{f['ratio']:.3f}"
    return f"{f['ratio']:.3f} [{f['lo']:.3f}, {f['hi']:.3f}]"


def main(paths: list[str]) -> int:
    spread: dict[tuple, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    for path in paths:
        with open(path) as f:
            rep = json.load(f)
        attr = rep.get("attribution") or {}
        model = ((rep.get("run") or {}).get("model") or {}).get("name", "?")
        load = (rep.get("environment") or {}).get("load_average")
        print(f"== {path}: {model}; status {rep['verdict']['status']}; load {load}; wall {rep.get('wall_s', 0):.0f} s")
        for mock, a in (attr.get("mocks") or {}).items():
            h = a["headline"]["samples_per_s"]
            print(
                f"  {mock}: per-GPU samples/s benchmark/run {_fmt(h)}; product {a['product']:.3f}; "
                f"interaction {a['interaction'] if a['interaction'] is None else round(a['interaction'], 3)}"
            )
            spread[(model, mock)]["headline"].append(h["ratio"])
            for fac in a["factors"]:
                print(f"    {fac['factor']:<24} {_fmt(fac)}")
                if fac.get("ratio") is not None:
                    spread[(model, mock)][fac["factor"]].append(fac["ratio"])
            if a["degenerate"]["finding"]:
                print(f"    DEGENERATE: {a['degenerate']['finding']}")
    print("\n== spread over the reports: min / median / max (largest deviation from the median)")
    for (model, mock), figs in spread.items():
        for name, vals in figs.items():
            med = statistics.median(vals)
            dev = max(abs(v / med - 1) for v in vals) if med else float("nan")
            print(
                f"  {model} {mock} {name:<24} n={len(vals)} {min(vals):.3f} / {med:.3f} / {max(vals):.3f} ({dev:.1%})"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
