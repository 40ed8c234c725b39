"""The data-parallel straggler model recomputed from an audit report (its census and measured micro-batches).

    python bench/straggler_from_report.py RUN_DIR [RUN_DIR ...] [--dp 8 64 512 4096]

For each report.json: fits the per-micro-batch cost model on every source's measured micro-batches,
calibrates it per source (``straggler_model.calibrate``), and simulates the run's data-parallel sizes as the
audit does (sync by the run's EP, weak scaling: the run's micro-batches per rank at every DP). Prints the
straggler factor per source and DP and each mock's samples/s ratio to real with and without stragglers,
then min/median/max over the runs.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
from vlmdata.audit.analysis.straggler_model import Sample, calibrate, fit_cost_model, simulate  # noqa: E402
from vlmdata.audit.settings.run_spec import RunSpec  # noqa: E402


def from_report(rep: dict, dps: list[int]) -> dict:
    spec = rep["run"]["run"]
    run = RunSpec(
        micro_batch_size=spec["micro_batch_size"],
        global_batch_size=spec["global_batch_size"],
        seq_length=spec["seq_length"],
        seq_policy=spec["seq_policy"],
        tp=spec["tp"],
        pp=spec["pp"],
        ep=spec["ep"],
        cp=spec["cp"],
        etp=spec["etp"],
        dp=spec["dp"],
    )
    micro = [
        {**m, "source": n}
        for n, s in rep["sources"].items()
        for r in s["records"]
        for m in r.get("micro") or []
        if m.get("ms") is not None
    ]
    opt = [r["times_ms"]["optimizer"] + r["times_ms"].get("grad_sync", 0.0) for r in rep["sources"]["real"]["records"]]
    cost = calibrate(fit_cost_model(micro, optimizer_ms=sum(opt) / len(opt)), micro)
    census = {n: [Sample(int(t), tuple(p)) for t, p in s["census"]["epoch_samples"]] for n, s in rep["sources"].items()}
    return simulate(
        census,
        cost,
        micro_batch_size=run.micro_batch_size,
        micro_batches_per_rank=run.micro_batches,
        dp_sizes=dps,
        padded_len=lambda longest, b: run.padded_length(longest),
        sync="micro_batch" if run.ep > 1 else "step",
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("runs", nargs="+")
    ap.add_argument("--dp", type=int, nargs="+", default=[8, 64, 512, 4096])
    args = ap.parse_args()
    acc: dict[tuple, list[float]] = {}
    for path in args.runs:
        with open(os.path.join(path, "report.json")) as f:
            sim = from_report(json.load(f), args.dp)
        for n, per in sim["sources"].items():
            for dp in args.dp:
                acc.setdefault((n, "factor", dp), []).append(per[dp]["straggler_factor"])
        for key in ("ratio_vs_real", "ratio_vs_real_no_stragglers"):
            for n, per in sim[key].items():
                for dp in args.dp:
                    acc.setdefault((n, key, dp), []).append(per[dp])
        print(
            os.path.basename(path.rstrip("/")),
            sim["sync"],
            "calibration",
            {
                n: round(f, 3) if (f := c["fit"]["calibration_factor"]) is not None else "mean"
                for n, c in sim["cost"].items()
            },
        )
    print(f"{'source':13s} {'figure':28s} {'DP':>5s}  min / median / max")
    for (n, key, dp), xs in sorted(acc.items()):
        print(f"{n:13s} {key:28s} {dp:5d}  {min(xs):.3f} / {statistics.median(xs):.3f} / {max(xs):.3f}")


if __name__ == "__main__":
    main()
