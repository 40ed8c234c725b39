"""The audit's plan against what the run then measured (issue 33): for each report.json given, the estimated peak
memory of the measured part (``plan.measured.memory.total``) against the largest measured ``peak_mem_bytes``, the
expected step time per source (``plan.times.step_s``) against the measured median, the expected wall time before
measuring and in all against the report's, and whether the budget was kept.

    python bench/plan_check.py /tmp/fam/*/report.json > plan_check.txt

On the GPU machine, after bench/gpu_families.sh (whose reports carry the plan):

    bash bench/gpu_families.sh $OUT a3b a3b-pre a3b-lora && python3 bench/plan_check.py /tmp/fam/*/report.json \
        > $OUT/plan_check.txt
"""

from __future__ import annotations

import json
import sys


def _gib(n) -> str:
    return "-" if not n else f"{n / 2**30:.1f}"


def _row(path: str) -> list[str]:
    rep = json.load(open(path))
    plan = rep.get("plan") or {}
    measured = (plan.get("measured") or {}).get("memory") or {}
    peaks = [r.get("peak_mem_bytes") or 0 for s in (rep.get("sources") or {}).values() for r in s.get("records") or []]
    times = plan.get("times") or {}
    steps = {
        n: (s.get("summary") or {}).get("step_ms", {}).get("median") for n, s in (rep.get("sources") or {}).items()
    }
    ratio = [
        f"{n} {times['step_s'][n] * 1e3 / ms:.2f}" for n, ms in steps.items() if ms and n in (times.get("step_s") or {})
    ]
    m = rep.get("measurement") or {}
    before = (m.get("total_seconds") or 0) - (m.get("measure_seconds") or 0)
    budget = (plan.get("budget") or {}).get("budget_s")
    return [
        path.rsplit("/", 2)[-2],
        _gib(measured.get("total")),
        _gib(max(peaks) if peaks else None),
        ", ".join(ratio) or "-",
        f"{times.get('before_measuring_s', 0):.0f} / {before:.0f}",
        f"{times.get('total_s', 0):.0f} / {rep.get('wall_s', 0):.0f}",
        f"{budget:.0f} {'kept' if budget and rep.get('wall_s', 0) <= budget else 'PASSED'}" if budget else "-",
        str(rep.get("stopped") or "-"),
    ]


def main(paths: list[str]) -> None:
    head = [
        "cell",
        "peak GiB est.",
        "peak GiB meas.",
        "step est./meas. per source",
        "before measuring s est./meas.",
        "wall s est./meas.",
        "budget s",
        "stopped",
    ]
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    for p in paths:
        try:
            print("| " + " | ".join(_row(p)) + " |")
        except (OSError, ValueError, KeyError, TypeError) as e:
            print(f"| {p} | unreadable: {e} |")


if __name__ == "__main__":
    main(sys.argv[1:])
