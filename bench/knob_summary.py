"""Line up the knob effects of several sweep reports (repeats, source orders) of one grid.

    python bench/knob_summary.py RUN_DIR_OR_REPORT_JSON [...]

Per run: the verdict, the knob-by-source table (samples/s, pooled, 95% interval), the mocks' findings,
each source's best set and the card lines. Across the runs: each knob's pooled effect per source as
min / median / max of the point estimates with every run's interval, and whether the verdict, the findings
and real's best set were the same in every run (``vlmdata.audit.analysis.knob_effects``, ``decisions``).
"""

from __future__ import annotations

import json
import os
import statistics
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
from vlmdata.audit.analysis.knob_effects import fmt_effect  # noqa: E402
from vlmdata.audit.report.knob_tables import knob_rows  # noqa: E402


def _load(path: str) -> dict:
    return json.load(open(os.path.join(path, "report.json") if os.path.isdir(path) else path))


def _run(name: str, r: dict) -> None:
    print(f"== {name}: {r['verdict']['line']}")
    head, rows = knob_rows(r)
    print("   " + " | ".join(head))
    for row in rows:
        print("   " + " | ".join(row))
    for n, ps in r["decisions"]["per_source"].items():
        print(f"   best set of {n}: {', '.join(ps.get('best_set') or [])}")
    for line in (r.get("memory") or {}).get("lines", []):
        print(f"   card: {line}")


def main(argv: list[str]) -> int:
    if not argv:
        print(__doc__)
        return 2
    runs = {p.rstrip("/"): _load(p) for p in argv}
    for name, r in runs.items():
        _run(name, r)
    print("== across runs: pooled samples/s effect, min / median / max of the points; every run's interval")
    effects: dict[tuple[str, str], list[dict]] = {}
    for r in runs.values():
        for ch in r["knob_effects"]["changes"]:
            for n, e in ch["sources"].items():
                eff = e["pooled"].get("samples_per_s")
                if eff:
                    effects.setdefault((ch["label"], n), []).append(eff)
    for (change, n), effs in effects.items():
        pts = [e["ratio"] - 1 for e in effs]
        spread = f"{min(pts):+.1%} / {statistics.median(pts):+.1%} / {max(pts):+.1%}"
        print(f"   {change:32s} {n:14s} {spread}   " + "; ".join(fmt_effect(e) for e in effs))
    same = {
        key: {json.dumps(fn(r), sort_keys=True, default=str) for r in runs.values()}
        for key, fn in (
            ("status", lambda r: r["verdict"]["status"]),
            ("findings", lambda r: [(f["change"], f["source"], f["state"]) for f in r["knob_effects"]["findings"]]),
            ("real's best set", lambda r: r["decisions"]["per_source"]["real"]["best_set"]),
        )
    }
    for key, values in same.items():
        print(f"   {key}: {'the same in every run' if len(values) == 1 else 'DIFFERS: ' + ' vs '.join(values)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
