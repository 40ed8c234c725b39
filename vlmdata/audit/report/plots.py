"""The report's PNGs (matplotlib Agg, imported when a plot is drawn): throughput per source with intervals,
stacked stages, visual tokens per sample, the simulated stragglers; a sweep's samples/s per configuration."""

from __future__ import annotations

import io

from vlmdata.audit.analysis.metrics import STAGE_ORDER, rate_ci
from vlmdata.audit.analysis.straggler_check import plot_stragglers
from vlmdata.audit.analysis.verdict import GAP_METRICS, METRIC_LABELS
from vlmdata.audit.logs import report_content
from vlmdata.audit.report.tables import measured

# one fixed colour per stage (tab20 has 20 distinct colours; stages never share one)
STAGE_COLOURS = dict(
    zip(
        STAGE_ORDER,
        (
            "#7f7f7f",
            "#bcbd22",
            "#17becf",
            "#9467bd",
            "#d62728",
            "#ff7f0e",
            "#1f77b4",
            "#8c564b",
            "#2ca02c",
            "#98df8a",
            "#aec7e8",
            "#393b79",
            "#c7c7c7",
            "#dbdb8d",
            "#e377c2",
            "#ff9896",
            "#000000",
        ),
    )
)


def plots(report: dict) -> dict[str, bytes]:
    """PNG bytes: throughput per source with intervals, stacked stages, visual tokens per sample."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    if report.get("kind") == "sweep":
        return {"decisions": _sweep_plot(plt, report)}
    names = [n for n, _ in measured(report)]
    sums = [report["sources"][n]["summary"] for n in names]
    gaps = (report.get("verdict") or {}).get("gaps", {})
    logs = report.get("kind") == "logs"
    metrics = report_content(report)["plot_metrics"] if logs else list(GAP_METRICS)
    out = {}
    if not metrics:
        return out
    fig, axes = plt.subplots(1, len(metrics), figsize=(4.4 * len(metrics), 3.8), squeeze=False)
    for ax, m in zip(axes[0], metrics):
        vals = [s["rates"].get(m) or 0.0 for s in sums]
        real = ((report["sources"].get("real") or {}).get("summary") or {}).get("rates", {}).get(m)  # None: OOM
        err = [[0.0] * len(names), [0.0] * len(names)]
        for i, n in enumerate(names):
            ci = gaps.get(n, {}).get(m) if gaps else None
            if n == "real":
                ci = _own_interval(report["sources"][n].get("records") or [], m, report.get("world_size", 1))
            if ci and ci.get("lo") is not None and real:
                err[0][i] = max(vals[i] - ci["lo"] * real, 0.0)
                err[1][i] = max(ci["hi"] * real - vals[i], 0.0)
        ax.bar(names, vals, yerr=err, capsize=4, color=["#c44" if n != "real" else "#4a4" for n in names])
        ax.set_title(METRIC_LABELS[m])
        ax.tick_params(axis="x", labelrotation=20, labelsize=8)
    fig.suptitle(
        "throughput per source (error bars: 95% bootstrap intervals; real: of its own rate, "
        "others: of the ratio to real)",
        fontsize=9,
    )
    fig.tight_layout()
    out["throughput"] = _png(fig, plt)
    if logs:  # logs carry no stage times or visual tokens
        return out
    if any(s["stages_ms_per_sample"] for s in sums):
        out["stages"] = _stages_plot(plt, names, sums)
    if any(s["visual_tokens_per_sample"] for s in sums):
        out["visual_tokens"] = _visual_plot(plt, names, sums)
    sim = report.get("straggler_model")
    if sim and "sources" in sim:
        out["stragglers"] = plot_stragglers(sim)
    return out


def _sweep_plot(plt, report: dict) -> bytes:
    """samples/s of every configuration, one bar per source; x marks out of memory, the best is starred."""
    d = report["decisions"]
    names, labels = list(d["per_source"]), d["configs"]
    fig, ax = plt.subplots(figsize=(max(8.0, 0.9 * len(labels) * max(1, len(names)) / 2), 4.2))
    width = 0.8 / max(1, len(names))
    for j, n in enumerate(names):
        rows = d["per_source"][n]["rows"]
        xs = [i + j * width for i in range(len(labels))]
        ax.bar(xs, [r["samples_per_s"] or 0.0 for r in rows], width, label=n)
        for x, r in zip(xs, rows):
            if r["oom"]:
                ax.plot(x, 0, "x", color="black")
            elif r["config"] == d["per_source"][n]["best"]:
                ax.plot(x, r["samples_per_s"], "*", color="black")
    ax.set_xticks([i + 0.4 - width / 2 for i in range(len(labels))])
    ax.set_xticklabels([lab.replace(" ", "\n") for lab in labels], fontsize=6)
    ax.set_ylabel("samples/s")
    ax.set_title("samples/s per configuration (x: out of memory, *: the source's best)")
    ax.legend(fontsize=7)
    fig.tight_layout()
    return _png(fig, plt)


def _own_interval(records: list[dict], metric: str, world: int) -> dict | None:
    """A source's own rate interval as a ratio to its rate (for its error bar)."""
    ci = rate_ci(records, metric, world_size=world) if records else None
    if not ci or not ci["rate"]:
        return None
    return {"lo": ci["lo"] / ci["rate"], "hi": ci["hi"] / ci["rate"]}


def _stages_plot(plt, names, sums) -> bytes:
    fig, ax = plt.subplots(figsize=(9, 4))
    bottom = [0.0] * len(names)
    for k in STAGE_ORDER:
        vals = [s["stages_ms_per_sample"].get(k, 0.0) for s in sums]
        if any(vals):
            ax.bar(names, vals, bottom=bottom, label=k, color=STAGE_COLOURS.get(k))
            bottom = [b + v for b, v in zip(bottom, vals)]
    ax.set_ylabel("ms per sample")
    ax.set_title("stage breakdown per source")
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1, 1))
    fig.tight_layout()
    return _png(fig, plt)


def _visual_plot(plt, names, sums) -> bytes:
    """Histogram outlines of visual tokens per sample. Paired sources (real and its twin) coincide bin for bin,
    so real is drawn first as a wide translucent band and every other source on top with its own dash
    pattern: no line hides another."""
    fig, ax = plt.subplots(figsize=(9, 3.8))
    allv = [v for s in sums for v in s["visual_tokens_per_sample"]]
    bins = max(min(len(set(allv)), 40), 1) if allv else 10
    order = sorted(range(len(names)), key=lambda i: names[i] != "real")  # real first: underneath
    dashes = ["--", ":", "-.", (0, (5, 2, 1, 2)), (0, (1, 1))]
    k = 0
    for i in order:
        n, s = names[i], sums[i]
        if not s["visual_tokens_per_sample"]:
            continue
        style = (
            {"linestyle": "-", "linewidth": 5.0, "alpha": 0.35, "zorder": 1}
            if n == "real"
            else {"linestyle": dashes[k % len(dashes)], "linewidth": 1.8, "zorder": 2 + k}
        )
        k += n != "real"
        ax.hist(
            s["visual_tokens_per_sample"],
            bins=bins,
            range=(min(allv), max(allv) + 1),
            histtype="step",
            label=f"{n} (n={len(s['visual_tokens_per_sample'])})",
            **style,
        )
    ax.set_xlabel("visual tokens per sample")
    ax.set_title("distribution of visual tokens per sample (paired sources coincide: real is the wide band)")
    ax.legend(fontsize=8)
    fig.tight_layout()
    return _png(fig, plt)


def _png(fig, plt) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=90)
    plt.close(fig)
    return buf.getvalue()
