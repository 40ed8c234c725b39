"""The straggler model against the measured ranks of a torchrun audit (``check_ranks``), and its plot
(``plot_stragglers``); both read ``vlmdata.audit.analysis.straggler_model``'s output or the ranks' records.
"""

from __future__ import annotations

import io
from collections.abc import Mapping, Sequence

import numpy as np

from vlmdata.audit.analysis.result_types import Records
from vlmdata.audit.analysis.straggler_cost import calibrate, cost_ms, fit_cost_model
from vlmdata.audit.sources.registry import AuditError

__all__ = ["check_ranks", "plot_stragglers"]


def plot_stragglers(result: dict) -> bytes:
    """PNG of a ``simulate`` result: straggler factor vs DP per source, and each source's samples/s ratio
    to real vs DP with stragglers (solid) and without (dashed).

    Args:
        result: what ``simulate`` returned.

    Returns:
        The PNG's bytes.
    """
    try:  # matplotlib is heavy and optional: imported only when a plot is asked for
        from matplotlib.figure import Figure
    except ImportError:
        raise AuditError("plot_stragglers needs matplotlib (pip install 'vlmdata[plot]')") from None
    dps = result["dp_sizes"]
    fig = Figure(figsize=(11, 4.2))
    ax1, ax2 = fig.subplots(1, 2)
    color = {name: f"C{i}" for i, name in enumerate(result["sources"])}  # one colour per source in both panels
    for name, by_dp in result["sources"].items():
        ax1.plot(dps, [by_dp[dp]["straggler_factor"] for dp in dps], marker="o", color=color[name], label=name)
    ax1.set(xscale="log", xlabel="data-parallel size", ylabel="E[slowest] / E[mean]", title="Straggler factor")
    ax1.axhline(1.0, color="grey", lw=0.8)
    ax1.legend()
    for name, by_dp in result["ratio_vs_real"].items():
        ax2.plot(dps, [by_dp[dp] for dp in dps], marker="o", color=color[name], label=f"{name} (with stragglers)")
        no = result["ratio_vs_real_no_stragglers"][name]
        ax2.plot(dps, [no[dp] for dp in dps], ls="--", color=color[name], label=f"{name} (without)")
    ax2.set(xscale="log", xlabel="data-parallel size", ylabel="samples/s vs real", title="Mock / real ratio")
    ax2.axhline(1.0, color="grey", lw=0.8)
    ax2.legend(fontsize="small")
    mbs, m = result["micro_batch_size"], result["micro_batches_per_rank"]
    fig.suptitle(f"sync={result['sync']}, micro-batch size {mbs}, {m} micro-batches per rank")
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110)
    return buf.getvalue()


def check_ranks(per_rank: Mapping[str, Sequence[Records]], sync: str = "step") -> dict:
    """The straggler model against measured ranks (torchrun): for every measured global step of every source,
    the model's slowest-rank prediction from the micro-batches each rank actually ran (the cost model fitted and
    calibrated on all ranks' micro-batches, ``fit_cost_model`` + ``calibrate``) against the measured slowest
    rank (the step time of the rank that took longest).

    Args:
        per_rank: source -> [rank][step] records (each with ``step_ms``, ``micro`` and ``times_ms``).
        sync: as ``simulate``: "micro_batch" (EP > 1) or "step".

    Returns:
        ``{source: {"measured_ms", "predicted_ms", "error", "steps", "factor_measured", "factor_predicted"}}``
        (means over steps; error = predicted / measured - 1; factors: slowest / mean rank).
    """
    micro = [
        {**m, "source": name}
        for name, ranks in per_rank.items()
        for recs in ranks
        for r in recs
        for m in r.get("micro") or []
        if m.get("ms") is not None and m.get("tokens_total") is not None
    ]
    if len(micro) < 2:
        return {}
    opt = [
        (r.get("times_ms") or {}).get("optimizer", 0.0) + (r.get("times_ms") or {}).get("grad_sync", 0.0)
        for ranks in per_rank.values()
        for recs in ranks
        for r in recs
    ]
    costs = calibrate(fit_cost_model(micro, optimizer_ms=float(np.mean(opt)) if opt else 0.0), micro)
    out = {}
    for name, ranks in per_rank.items():
        c = costs.get(name)
        if c is None:
            continue
        measured, predicted, fm, fp = [], [], [], []
        for step in zip(*ranks):
            per = [
                [float(cost_ms(c, m["tokens_total"], m["patches"], m["patch_sq"])) for m in r["micro"]] for r in step
            ]
            if sync == "micro_batch":
                pred = sum(max(col) for col in zip(*per)) + c.optimizer_ms
            else:
                pred = max(sum(p) for p in per) + c.optimizer_ms
            times = [float(r["step_ms"]) for r in step]
            mean_pred = float(np.mean([sum(p) for p in per])) + c.optimizer_ms
            if not (max(times) > 0 and mean_pred > 0):
                continue  # a step of no measured or no modelled time has no factor (never a division by zero)
            measured.append(max(times))
            predicted.append(pred)
            fm.append(max(times) / float(np.mean(times)))
            fp.append(pred / mean_pred)
        if measured:
            out[name] = {
                "measured_ms": float(np.mean(measured)),
                "predicted_ms": float(np.mean(predicted)),
                "error": float(np.mean(predicted) / np.mean(measured) - 1),
                "steps": len(measured),
                "factor_measured": float(np.mean(fm)),
                "factor_predicted": float(np.mean(fp)),
            }
    return out
