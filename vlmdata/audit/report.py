"""The audit report: one dict with every figure, written as report.json, report.md and report.html.

``build_report(result, ...)`` turns the runner's result (or several ranks' results) into
``{"schema", "kind", "config", "environment", "workload", "sources": {name: {"summary", "loader",
"records", "per_rank"?}}, "verdict", "stragglers"}``.  ``write_report(report, dir)`` writes the three
files; the HTML is self-contained (plots as base64 PNGs, matplotlib Agg).
"""

from __future__ import annotations

import base64
import html
import io
import json
import os

from vlmdata.audit.distributed import merge_ranks
from vlmdata.audit.distributed import stragglers as find_stragglers
from vlmdata.audit.logs import report_content
from vlmdata.audit.metrics import STAGE_ORDER, TOKEN_DEFINITIONS, rate_ci, summarize
from vlmdata.audit.run_tables import (
    composition_rows,
    run_rows,
    stage_efficiency_rows,
    straggler_check_rows,
    straggler_rows,
    summary_stage_tflops,
)
from vlmdata.audit.straggler_model import check_ranks, plot_stragglers
from vlmdata.audit.verdict import GAP_METRICS, METRIC_LABELS, decide, mock_line, proxy_line

SCHEMA = "vlmdata.audit/2"
RATE_COLUMNS = [
    ("samples_per_s", "samples/s"),
    ("images_per_s", "images/s"),
    ("nonpad_tokens_per_s", "non-pad tok/s"),
    ("loss_tokens_per_s", "loss tok/s"),
    ("visual_tokens_per_s", "visual tok/s"),
    ("tflops", "TFLOP/s/GPU"),
]
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


def build_report(results: list[dict], *, threshold: float, straggler_ratio: float = 1.10, seed: int = 0) -> dict:
    """``results``: the runner's result of each rank (one element without torchrun)."""
    first = results[0]
    world = len(results)
    interleaved = (first.get("measurement") or {}).get("method") == "interleaved"
    report = {
        "schema": SCHEMA,
        "kind": "run",
        "config": first["config"],
        "environment": first["environment"],
        "workload": first["workload"],
        "world_size": world,
        "measurement": first.get("measurement"),
        "run": first.get("run"),
        "composition": first.get("composition"),
        "straggler_model": first.get("straggler_model"),
        "definitions": {
            "tokens": TOKEN_DEFINITIONS,
            "sources": {n: s.get("definition") for n, s in first["sources"].items()},
        },
        "sources": {},
        "stragglers": {},
    }
    runs = {}
    for name in first["sources"]:
        if first["sources"][name].get("oom") or not first["sources"][name]["records"]:
            report["sources"][name] = {k: v for k, v in first["sources"][name].items() if k != "world_size"}
            report["sources"][name]["summary"] = None  # ran out of memory: a result, not a figure
            continue
        per_rank = [r["sources"][name]["records"] for r in results]
        records = per_rank[0] if world == 1 else merge_ranks(per_rank)
        summary = summarize(records, world)
        summary["stage_tflops"] = summary_stage_tflops(summary, records)
        src = {
            "summary": summary,
            "records": records,
            **{k: v for k, v in first["sources"][name].items() if k not in ("records", "world_size")},
        }
        if world > 1:
            src["per_rank"] = [summarize(recs) for recs in per_rank]
            report["stragglers"][name] = find_stragglers(per_rank, straggler_ratio)
        report["sources"][name] = src
        runs[name] = {"records": records, "world_size": world, "interleaved": interleaved}
    if world > 1:  # the straggler model against the measured slowest rank of every step
        ep = ((first.get("run") or {}).get("run") or {}).get("ep") or 1
        per = {n: [r["sources"][n]["records"] for r in results] for n in runs}
        report["straggler_check"] = check_ranks(per, sync="micro_batch" if ep > 1 else "step")
    summaries = {k: v["summary"] for k, v in report["sources"].items() if v["summary"] is not None}
    flagged = sorted({r for s in report["stragglers"].values() for r in s["flagged"]})
    if "real" in runs and len(runs) > 1:
        report["verdict"] = decide(runs, summaries, threshold=threshold, stragglers=flagged, seed=seed)
    else:
        report["verdict"] = None
    return report


# ----------------------------------------------------------------------------- tables (shared by md and html)


def _f(v, fmt="{:.3g}") -> str:
    return "-" if v is None else fmt.format(v)


def measured(report: dict) -> list[tuple[str, dict]]:
    """(name, source) of every source with figures (not out of memory)."""
    return [(n, s) for n, s in report["sources"].items() if s.get("summary") is not None]


def _oom_cell(src: dict) -> str:
    return f"out of memory ({src['oom']['where']})" if src.get("oom") else "no steps"


def source_rows(report: dict) -> tuple[list[str], list[list[str]]]:
    head = [
        "source",
        "steps",
        "step ms (median [p10, p90])",
        *[c for _, c in RATE_COLUMNS],
        "data wait",
        "padding",
        "peak mem GB",
    ]
    rows = []
    for name, src in report["sources"].items():
        s = src.get("summary")
        if s is None:
            rows.append([name, "0", _oom_cell(src)] + ["-"] * (len(head) - 3))
            continue
        st = s["step_ms"]
        pm = s.get("peak_mem_bytes")
        rows.append(
            [
                name,
                str(s["steps"]),
                f"{st['median']:.1f} [{st['p10']:.1f}, {st['p90']:.1f}]",
                *[_f(s["rates"].get(k)) for k, _ in RATE_COLUMNS],
                _f(s.get("data_wait_fraction"), "{:.1%}"),
                _f(s["shape"].get("padding_fraction"), "{:.1%}"),
                _f(None if pm is None else pm / 1e9, "{:.1f}"),
            ]
        )
    return head, rows


def shape_rows(report: dict) -> tuple[list[str], list[list[str]]]:
    head = [
        "source",
        "images/sample",
        "tokens/sample (padded)",
        "non-pad tok/sample",
        "loss tok/sample",
        "visual tok/sample",
        "GFLOP/sample",
        "ms/sample",
        "ms per 1k non-pad tok",
    ]
    rows = []
    for name, src in measured(report):
        sh = src["summary"]["shape"]
        fl = sh.get("flops_per_sample")
        rows.append(
            [
                name,
                _f(sh.get("images_per_sample")),
                _f(sh.get("tokens_total_per_sample")),
                _f(sh.get("tokens_nonpad_per_sample")),
                _f(sh.get("tokens_loss_per_sample")),
                _f(sh.get("tokens_visual_per_sample")),
                _f(None if fl is None else fl / 1e9),
                _f(sh.get("ms_per_sample")),
                _f(sh.get("ms_per_1k_nonpad_tokens")),
            ]
        )
    return head, rows


def measurement_rows(report: dict) -> tuple[list[str], list[list[str]]]:
    """How each source's figures were obtained: steps, start-up and epoch-boundary waits, first-seen
    shapes inside timed steps (expected 0), census mismatches, pairing with real."""
    head = [
        "source",
        "steps",
        "paired with real",
        "start-up wait ms",
        "epoch boundaries (steps, ms)",
        "steady data wait",
        "first-seen shapes in timed steps",
        "batches unlike the census",
    ]
    rows = []
    for name, src in measured(report):
        s = src["summary"]
        dw = s.get("data_wait") or {}
        eb, st = dw.get("epoch_boundary") or {}, dw.get("steady") or {}
        pairing = src.get("pairing")
        paired = (
            "-"
            if name == "real"
            else ("no" if not pairing else f"{pairing['same_samples']}/{pairing['steps']} steps same samples")
        )
        rows.append(
            [
                name,
                str(s["steps"]),
                paired,
                _f(src.get("startup_wait_ms"), "{:.0f}"),
                f"{eb.get('steps', 0)}, {eb.get('ms', 0.0):.0f}" if dw else "-",
                _f(st.get("fraction"), "{:.2%}"),
                str(s.get("first_seen_shapes", "-")),
                str((src.get("census") or {}).get("mismatched_steps", "-")),
            ]
        )
    return head, rows


def stage_rows(report: dict) -> tuple[list[str], list[list[str]]]:
    stages = [k for k in STAGE_ORDER if any(k in s["summary"]["stages_ms_per_sample"] for _, s in measured(report))]
    rows = [
        [name, *[_f(src["summary"]["stages_ms_per_sample"].get(k), "{:.2f}") for k in stages]]
        for name, src in measured(report)
    ]
    return ["source (ms per sample)", *stages], rows


def gap_rows(verdict: dict) -> tuple[list[str], list[list[str]]]:
    """One row per source: each gap with its interval ("too few steps" without one) and the stage that makes
    most of the gap, named only when the gap lies beyond the noise (``verdict.stage_attribution``)."""
    head = ["source / real", *[METRIC_LABELS[m] for m in GAP_METRICS], "top stage of the gap"]
    rows = []
    for src, g in verdict["gaps"].items():
        cells = []
        for m in GAP_METRICS:
            ci = g.get(m)
            cells.append(
                "-"
                if ci is None
                else f"{ci['ratio']:.3f}"
                + (
                    f" [{ci['lo']:.3f}, {ci['hi']:.3f}]"
                    if ci.get("lo") is not None
                    else " (too few steps)"
                    if ci.get("few_steps")
                    else ""
                )
            )
        att = verdict["attribution"][src]
        top = att["top_stage"] or ("- (gap within the noise)" if att.get("significant") is False else "-")
        rows.append([src, *cells, top])
    return head, rows


def rank_rows(report: dict) -> tuple[list[str], list[list[str]]]:
    head = [
        "source",
        "rank",
        "samples/s",
        "TFLOP/s",
        "visual tok/step",
        "vs median",
        "straggler steps",
        "forward ms",
        "flagged",
    ]
    rows = []
    for name, st in report.get("stragglers", {}).items():
        per = report["sources"][name].get("per_rank") or []
        for pr, s in zip(st["per_rank"], per):
            rows.append(
                [
                    name,
                    str(pr["rank"]),
                    _f(s["rates"]["samples_per_s"]),
                    _f(s["rates"]["tflops"]),
                    f"{pr['visual_tokens_per_step']:.0f}",
                    f"{pr['relative_to_median']:.2f}",
                    f"{pr['straggler_step_fraction']:.0%}",
                    f"{pr['forward_ms_mean']:.1f}",
                    "yes" if pr["rank"] in st["flagged"] else "",
                ]
            )
    return head, rows


def sweep_rows(report: dict) -> tuple[list[str], list[list[str]]]:
    """One row per configuration: each source's samples/s (or oom) and peak memory; '*' = does not fit."""
    d = report["decisions"]
    names = list(d["per_source"])
    head = ["configuration", *[f"{n} samples/s" for n in names], *[f"{n} peak GB" for n in names]]
    rows = []
    for i, lab in enumerate(d["configs"]):
        cells = [d["per_source"][n]["rows"][i] for n in names]
        rate = ["oom" if c["oom"] else (_f(c["samples_per_s"]) + ("" if c["fits"] else " *")) for c in cells]
        rows.append([lab, *rate, *[_f(c["peak_mem_gb"], "{:.1f}") for c in cells]])
    return head, rows


def decision_rows(report: dict) -> tuple[list[str], list[list[str]]]:
    d = report["decisions"]
    head = [
        "mock",
        "its best configuration",
        "real's best",
        "same",
        "Kendall tau (vs real)",
        "regret (real throughput lost)",
    ]
    rows = []
    for name, m in d["mocks"].items():
        regret = m["regret"]
        rows.append(
            [
                name,
                m["choice"] or "-",
                m["real_best"] or "-",
                "yes" if m["same"] else "no",
                _f(m["kendall_tau"], "{:.2f}"),
                "-" if regret is None else (str(m["choice_on_real"]) if regret == float("inf") else f"{regret:.1%}"),
            ]
        )
    return head, rows


def _tables(report: dict) -> list[tuple[str, tuple]]:
    if report.get("kind") == "logs":
        return [(title, (head, rows)) for title, head, rows in report_content(report)["tables"]]
    if report.get("kind") == "sweep":
        lim = report["decisions"].get("memory_limit_gb")
        return [
            ("Decisions: each mock's best configuration on real data", decision_rows(report)),
            (
                "Every configuration on every source" + (f" (* = peak memory over {lim} GB)" if lim else ""),
                sweep_rows(report),
            ),
        ]
    t = [
        ("Throughput per source", source_rows(report)),
        ("Workload shape", shape_rows(report)),
        ("Stage split", stage_rows(report)),
    ]
    for title, fn in (
        ("Stage efficiency (model FLOPs / stage time)", stage_efficiency_rows),
        ("The run (every setting and where it came from)", run_rows),
        ("From the measured slice to the run's step", composition_rows),
        ("Data-parallel stragglers (simulated from the census and the measured costs)", straggler_rows),
        ("Stragglers measured against the model (torchrun)", straggler_check_rows),
    ):
        rows = fn(report)
        if rows is not None:
            t.append((title, rows))
    if report.get("measurement"):
        t.append(("How it was measured", measurement_rows(report)))
    if report.get("verdict"):
        t.insert(1, ("Gaps (ratio to real, 95% bootstrap interval)", gap_rows(report["verdict"])))
    if report.get("stragglers"):
        t.append(("Per rank", rank_rows(report)))
    return t


# ----------------------------------------------------------------------------- plots


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
        real = report["sources"].get("real", {}).get("summary", {}).get("rates", {}).get(m)
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


# ----------------------------------------------------------------------------- writers


def _md_table(head, rows) -> str:
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    return "\n".join(lines + ["| " + " | ".join(r) + " |" for r in rows])


def _env_line(report: dict) -> str:
    e = report.get("environment") or {}
    keys = ("device_name", "device", "torch", "transformers", "python", "cuda", "cpu_count", "torch_threads")
    return ", ".join(f"{k} {e[k]}" for k in keys if e.get(k) is not None)


def _settings(report: dict) -> str:
    c = report.get("config") or {}
    keys = (
        "preset",
        "device",
        "seq_length",
        "micro_batch_size",
        "num_workers",
        "seed",
        "logits",
        "real",
        "profile",
        "step",
        "loader_options",
    )
    return ", ".join(f"{k} {c[k]}" for k in keys if c.get(k) is not None)


def _definitions(report: dict) -> list[tuple[str, str]]:
    d = report.get("definitions") or {}
    return [(k, v) for k, v in (d.get("sources") or {}).items() if v] + list((d.get("tokens") or {}).items())


def _definitions_html(report: dict) -> str:
    defs = _definitions(report)
    if not defs:
        return ""
    return (
        "<h2>Definitions</h2><dl>"
        + "".join(f"<dt><b>{html.escape(k)}</b></dt><dd>{html.escape(v)}</dd>" for k, v in defs)
        + "</dl>"
    )


def _loads(values) -> str:
    return "-" if not values else " / ".join(f"{v:.2f}" for v in values)


def _method_line(report: dict) -> str:
    m = report.get("measurement") or {}
    if not m:
        return ""
    w = m.get("warmup") or {}
    return (
        f"{m.get('steps_per_source')} steps per source in {m.get('rounds')} interleaved rounds of "
        f"{m.get('block')} (order rotating each round), stopped by {m.get('stop')}; every shape warmed first "
        f"({w.get('shape_batches')} warm-up batches, {w.get('shape_items')} shape items, "
        f"{w.get('seconds', 0):.1f} s) and {w.get('loader_steps_per_source')} untimed step(s) per source after "
        f"its loader started; load average {_loads(report.get('environment', {}).get('load_average'))} at the "
        f"start, {_loads(m.get('load_average_end'))} at the end."
    )


def _head_lines(report: dict) -> list[tuple[str, str]]:
    """(label, text) lines under the verdict: settings, environment and method of a run; workload, logs and
    notes of a log comparison; the grid of a sweep."""
    if report.get("kind") == "logs":
        return report_content(report)["lines"]
    if report.get("kind") == "sweep":
        grid = ", ".join(
            f"{k} {'/'.join(str(int(x) if isinstance(x, bool) else x) for x in v)}" for k, v in report["sweep"].items()
        )
        return [
            ("Sweep", f"{grid} ({len(report['configs'])} configurations, every one an audit of every source)"),
            ("Settings", _settings(report)),
            ("Environment", _env_line(report)),
            (
                "Definitions",
                "regret = 1 - real throughput of the mock's best configuration / real's best; "
                "infinite (oom) when the mock's choice runs out of memory on real data; Kendall tau "
                "= rank agreement of the mock's and real's throughputs over the configurations",
            ),
        ]
    lines = [("Settings", _settings(report)), ("Environment", _env_line(report))]
    if _method_line(report):
        lines.append(("Method", _method_line(report)))
    return lines


def markdown(report: dict) -> str:
    v = report.get("verdict")
    parts = [
        "# vlmdata audit" + {"logs": " compare", "sweep": " sweep"}.get(report.get("kind") or "", ""),
        "",
        f"**{v['line']}**" if v else "_no verdict (needs real and one other source)_",
        "",
    ]
    for label, text in _head_lines(report):
        parts += [f"{label}: {text}" + ("" if text.endswith(".") else "."), ""]
    for title, (head, rows) in _tables(report):
        parts += [f"## {title}", "", _md_table(head, rows), ""]
    if v and v.get("knobs"):
        parts += ["## Knobs (largest first)", ""] + [f"- **{k['knob']}**: {k['message']}" for k in v["knobs"]] + [""]
    if _definitions(report):
        parts += ["## Definitions", ""] + [f"- **{k}**: {t}" for k, t in _definitions(report)] + [""]
    return "\n".join(parts)


def html_page(report: dict, pngs: dict[str, bytes] | None = None) -> str:
    esc = html.escape
    v = report.get("verdict")
    body = [
        "<h1>vlmdata audit" + {"logs": " compare", "sweep": " sweep"}.get(report.get("kind") or "", "") + "</h1>",
        _headline_html(v) if v else "<p><i>no verdict</i></p>",
    ]
    body += [f"<p><b>{esc(label)}:</b> {esc(text)}</p>" for label, text in _head_lines(report)]
    for title, (head, rows) in _tables(report):
        body.append(
            f"<h2>{esc(title)}</h2><div class='scroll'><table><tr>"
            + "".join(f"<th>{esc(h)}</th>" for h in head)
            + "</tr>"
            + "".join("<tr>" + "".join(f"<td>{esc(c)}</td>" for c in r) + "</tr>" for r in rows)
            + "</table></div>"
        )
    if v and v.get("knobs"):
        body.append(
            "<h2>Knobs (largest first)</h2><ul>"
            + "".join(f"<li><b>{esc(k['knob'])}</b>: {esc(k['message'])}</li>" for k in v["knobs"])
            + "</ul>"
        )
    for name, data in (pngs or {}).items():
        body.append(
            f"<h2>{esc(name.replace('_', ' '))}</h2><img alt='{esc(name)}' "
            f"src='data:image/png;base64,{base64.b64encode(data).decode()}'>"
        )
    body.append(_definitions_html(report))
    style = (
        "body{font-family:sans-serif;margin:2em;max-width:1400px}table{border-collapse:collapse}"
        ".scroll{overflow-x:auto;max-width:100%}img{max-width:100%;height:auto}"
        "td,th{border:1px solid #ccc;padding:3px 8px;text-align:right}td:first-child{text-align:left}"
    )
    return (
        f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>vlmdata audit</title><style>{style}</style>"
        f"</head><body>{''.join(body)}</body></html>\n"
    )


STATUS_COLOURS = {"MISLEADING": "#b00", "UNDECIDED": "#b60", "OK": "#070"}
PROXY_COLOURS = {"trustworthy": "#070", "not trustworthy": "#b00", "undecided": "#b60"}


def _headline_html(v: dict) -> str:
    """The verdict as separate lines, each in its own colour: the mocks (MISLEADING red, UNDECIDED amber, OK
    green), synthetic as a proxy, the next knob (neutral). A verdict without those parts (a sweep's) is
    one line in its status colour."""
    esc = html.escape
    if "states" not in v:
        colour = STATUS_COLOURS.get(str(v.get("status")), "#333")
        return f"<p style='font-size:1.2em;color:{colour}'><b>{esc(v['line'])}</b></p>"
    lines = [(STATUS_COLOURS.get(v["status"], "#333"), mock_line(v), "1.2em")]
    proxy = proxy_line(v)
    if proxy:
        state = (v.get("synthetic_proxy") or {}).get("state", "undecided")
        lines.append((PROXY_COLOURS.get(state, "#333"), proxy[0].upper() + proxy[1:], "1.05em"))
    if v.get("next_knob"):
        lines.append(("#333", f"Next knob: {v['next_knob']}", "1.05em"))
    return "".join(
        f"<p class='verdict' style='font-size:{size};color:{colour};margin:0.3em 0'><b>{esc(text)}</b></p>"
        for colour, text, size in lines
    )


def write_report(report: dict, out_dir: str, with_plots: bool = True) -> dict[str, str]:
    """Write report.json, report.md and report.html into ``out_dir``; returns their paths."""
    os.makedirs(out_dir, exist_ok=True)
    paths = {k: os.path.join(out_dir, f"report.{k}") for k in ("json", "md", "html")}
    with open(paths["json"], "w") as f:
        json.dump(report, f, indent=1, sort_keys=True, default=str)
    with open(paths["md"], "w") as f:
        f.write(markdown(report))
    pngs = plots(report) if with_plots and (report.get("sources") or report.get("kind") == "sweep") else None
    with open(paths["html"], "w") as f:
        f.write(html_page(report, pngs))
    return paths
