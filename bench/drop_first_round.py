"""Ratios of audit reports recomputed without their first measured round (the one-off cost evidence).

    python bench/drop_first_round.py RUN_DIR [RUN_DIR ...]

For each report.json: samples/s of every source over all measured global steps and over the steps of rounds
1.. only, and each source's ratio to real both ways; then min/median/max over the runs. Shows how much the
first timed round after warm-up (loader workers still filling their queues, first optimizer steps) moved a
short audit's figures.
"""

from __future__ import annotations

import json
import os
import statistics
import sys


def rate(recs: list[dict]) -> float:
    return sum(r["samples"] for r in recs) / (sum(r["step_ms"] for r in recs) / 1e3)


def main() -> None:
    ratios: dict[tuple[str, str], list[float]] = {}
    for path in sys.argv[1:]:
        with open(os.path.join(path, "report.json")) as f:
            rep = json.load(f)
        src = {n: s["records"] for n, s in rep["sources"].items() if s.get("records")}
        line = []
        for name, recs in src.items():
            if name == "real":
                continue
            for label, keep in (("all", lambda r: True), ("rounds 1..", lambda r: r.get("round", 0) > 0)):
                a, b = [r for r in recs if keep(r)], [r for r in src["real"] if keep(r)]
                if a and b:
                    x = rate(a) / rate(b)
                    ratios.setdefault((name, label), []).append(x)
                    line.append(f"{name} {label} {x:.3f}")
        print(os.path.basename(path.rstrip("/")) + ": " + ", ".join(line))
    for (name, label), xs in sorted(ratios.items()):
        med = statistics.median(xs)
        dev = max(abs(x / med - 1) for x in xs)
        print(f"{name:14s} {label:11s} min {min(xs):.3f} median {med:.3f} max {max(xs):.3f}  max dev {dev:.1%}")


if __name__ == "__main__":
    main()
