"""The family x recipe matrix of ``bench/gpu_families.sh`` from its audit reports, one row per report:
``python3 bench/families_summary.py DIR/*/report.json`` (or the cells' folders; the cell is the report's folder
name).

Per cell: the family and model (its config.json), the status, the wall time to the verdict (the audit's
``wall_s``: start to report, model build, census, compile warm-up and measuring), the compile seconds and graphs
per compiled part (``measurement.compile.by_part``: vision, decoder), the parts that fell back to eager, the
measured steps per source and every mock's samples/s ratio to real with its 95% interval. A cell whose folder has
no report.json (killed by the time limit, or an error) is listed with ``no report``."""

from __future__ import annotations

import json
import os
import sys

HEAD = (
    "| cell | family | model | status | wall s | compile s | graphs vision/decoder | fallbacks | steps "
    "| samples/s ratios to real [95% CI] |"
)


def _ratio(g: dict | None) -> str:
    if not g or g.get("ratio") is None:
        return "-"
    if g.get("lo") is None:
        return f"{g['ratio']:.2f}x"
    return f"{g['ratio']:.2f}x [{g['lo']:.2f}, {g['hi']:.2f}]"


def row(cell: str, rep: dict) -> str:
    """One markdown row of the matrix for ``rep`` (a report.json's content)."""
    model = (rep.get("run") or {}).get("model") or {}
    m = rep.get("measurement") or {}
    c = m.get("compile") or {}
    by = c.get("by_part") or {}
    graphs = "/".join(str((by.get(p) or {}).get("graphs", "-")) for p in ("vision", "decoder"))
    v = rep.get("verdict") or {}
    ratios = "; ".join(f"{src} {_ratio(g.get('samples_per_s'))}" for src, g in sorted((v.get("gaps") or {}).items()))
    compile_s = f"{c['compile_seconds']:.0f}" if c.get("compile_seconds") is not None else "-"
    cells = [
        cell,
        str(model.get("family", "?")),
        os.path.basename(str(model.get("name", "?"))),
        str(v.get("status", "no verdict")),
        f"{rep['wall_s']:.0f}" if rep.get("wall_s") is not None else "-",
        compile_s if c else "not compiled",
        graphs if by else "-",
        ", ".join(c.get("fallbacks") or []) or "0",
        str(m.get("steps_per_source", "-")),
        ratios or "-",
    ]
    return "| " + " | ".join(cells) + " |"


def main(args: list[str]) -> int:
    paths = [a if a.endswith(".json") else os.path.join(a, "report.json") for a in args]
    print(HEAD)
    print("|" + "---|" * (HEAD.count("|") - 1))
    for path in paths:
        cell = os.path.basename(os.path.dirname(os.path.abspath(path)))
        if not os.path.exists(path):
            print(f"| {cell} | | | no report | | | | | | |")
            continue
        with open(path) as f:
            print(row(cell, json.load(f)))
    for path in paths:  # the fallback notes in full, where there are any
        if os.path.exists(path):
            with open(path) as f:
                notes = (((json.load(f).get("measurement") or {}).get("compile") or {}).get("notes")) or []
            for n in notes:
                print(f"\n{os.path.basename(os.path.dirname(os.path.abspath(path)))}: {n}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
