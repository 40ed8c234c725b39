"""Whole model against its composed slice, from pairs of audit reports (the composition's validation).

    python bench/compose_pairs.py DIR...      # each DIR holds NAME-whole/ and NAME-slice/ report folders

For every pair: each source's mean step time (whole, composed slice, their ratio), the decoder stages, and
the mock/real samples/s ratio of both; the goal is each source's time within 5% and every ratio within 3%.
Also each pair's *noise floor*: the vision tower's forward and backward on real batches, work that whole and
slice share exactly, so any difference there is the machine's from one process to the next, not the composition
(bench/compose_check.py runs both in one process instead).
"""

from __future__ import annotations

import glob
import json
import os
import sys


def load(path: str) -> dict:
    with open(os.path.join(path, "report.json")) as f:
        return json.load(f)


def main() -> None:
    for base in sys.argv[1:]:
        for whole_dir in sorted(glob.glob(os.path.join(base, "*-whole"))):
            slice_dir = whole_dir[: -len("whole")] + "slice"
            if not os.path.isdir(slice_dir):
                continue
            w, s = load(whole_dir), load(slice_dir)
            cells, rates = [], {}
            for src in w["sources"]:
                a, b = w["sources"][src]["summary"], s["sources"][src]["summary"]
                ta, tb = a["step_ms"]["mean"], b["step_ms"]["mean"]
                dec = lambda x: x["stages_ms"].get("lm_forward", 0) + x["stages_ms"].get("backward_decoder", 0)  # noqa: E731
                cells.append(
                    f"{src} step {ta:.0f} / {tb:.0f} ms ({tb / ta - 1:+.1%}), decoder {dec(a):.0f} / {dec(b):.0f}"
                )
                rates[src] = (a["rates"]["samples_per_s"], b["rates"]["samples_per_s"])
            mocks = [m for m in rates if m != "real"]
            ratio = ", ".join(
                f"{m}/real {rates[m][0] / rates['real'][0]:.3f} / {rates[m][1] / rates['real'][1]:.3f}" for m in mocks
            )
            print(f"{os.path.basename(whole_dir)[:-6]}: " + "; ".join(cells) + f"; {ratio} (whole / slice)")
            if "real" in w["sources"]:
                a, b = (x["sources"]["real"]["summary"]["stages_ms"] for x in (w, s))
                floor = [
                    f"{st} {a.get(st, 0):.0f} / {b.get(st, 0):.0f} ms ({b.get(st, 0) / a[st] - 1:+.1%})"
                    for st in ("vision", "backward_vision")
                    if a.get(st)
                ]
                print("  noise floor (same work in both), real " + "; ".join(floor))


if __name__ == "__main__":
    main()
