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

from .distributed import merge_ranks, stragglers as find_stragglers
from .metrics import STAGE_ORDER, summarize
from .verdict import GAP_METRICS, METRIC_LABELS, decide

SCHEMA = "vlmdata.audit/1"
RATE_COLUMNS = [("samples_per_s", "samples/s"), ("images_per_s", "images/s"), ("tokens_per_s", "tokens/s"),
                ("useful_tokens_per_s", "useful tok/s"), ("visual_tokens_per_s", "visual tok/s"),
                ("tflops", "TFLOP/s/GPU")]


def build_report(results: list[dict], *, threshold: float, straggler_ratio: float = 1.10, seed: int = 0) -> dict:
    """``results``: the runner's result of each rank (one element without torchrun)."""
    first = results[0]
    world = len(results)
    report = {"schema": SCHEMA, "kind": "run", "config": first["config"], "environment": first["environment"],
              "workload": first["workload"], "world_size": world, "sources": {}, "stragglers": {}}
    runs = {}
    for name in first["sources"]:
        per_rank = [r["sources"][name]["records"] for r in results]
        records = per_rank[0] if world == 1 else merge_ranks(per_rank)
        src = {"summary": summarize(records, world), "loader": first["sources"][name]["loader"], "records": records}
        if world > 1:
            src["per_rank"] = [summarize(recs) for recs in per_rank]
            report["stragglers"][name] = find_stragglers(per_rank, straggler_ratio)
        report["sources"][name] = src
        runs[name] = {"records": records, "world_size": world}
    summaries = {k: v["summary"] for k, v in report["sources"].items()}
    flagged = sorted({r for s in report["stragglers"].values() for r in s["flagged"]})
    if "real" in runs and len(runs) > 1:
        report["verdict"] = decide(runs, summaries, threshold=threshold, stragglers=flagged, seed=seed)
    else:
        report["verdict"] = None
    return report


# ----------------------------------------------------------------------------- tables (shared by md and html)

def _f(v, fmt="{:.3g}") -> str:
    return "-" if v is None else fmt.format(v)


def source_rows(report: dict) -> tuple[list[str], list[list[str]]]:
    head = ["source", "step ms (median [p10, p90])", *[c for _, c in RATE_COLUMNS], "data wait", "padding",
            "peak mem GB"]
    rows = []
    for name, src in report["sources"].items():
        s = src["summary"]
        st = s["step_ms"]
        pm = s.get("peak_mem_bytes")
        rows.append([name, f"{st['median']:.1f} [{st['p10']:.1f}, {st['p90']:.1f}]",
                     *[_f(s["rates"].get(k)) for k, _ in RATE_COLUMNS],
                     _f(s.get("data_wait_fraction"), "{:.1%}"), _f(s["shape"].get("padding_fraction"), "{:.1%}"),
                     _f(None if pm is None else pm / 1e9, "{:.1f}")])
    return head, rows


def shape_rows(report: dict) -> tuple[list[str], list[list[str]]]:
    head = ["source", "images/sample", "tokens/sample", "useful tok/sample", "visual tok/sample",
            "GFLOP/sample", "ms/sample", "ms per 1k useful tok"]
    rows = []
    for name, src in report["sources"].items():
        sh = src["summary"]["shape"]
        fl = sh.get("flops_per_sample")
        rows.append([name, _f(sh.get("images_per_sample")), _f(sh.get("tokens_total_per_sample")),
                     _f(sh.get("tokens_useful_per_sample")), _f(sh.get("tokens_visual_per_sample")),
                     _f(None if fl is None else fl / 1e9), _f(sh.get("ms_per_sample")),
                     _f(sh.get("ms_per_1k_useful_tokens"))])
    return head, rows


def stage_rows(report: dict) -> tuple[list[str], list[list[str]]]:
    stages = [k for k in STAGE_ORDER if any(k in s["summary"]["stages_ms_per_sample"]
                                            for s in report["sources"].values())]
    rows = [[name, *[_f(src["summary"]["stages_ms_per_sample"].get(k), "{:.2f}") for k in stages]]
            for name, src in report["sources"].items()]
    return ["source (ms per sample)", *stages], rows


def gap_rows(verdict: dict) -> tuple[list[str], list[list[str]]]:
    head = ["source / real", *[METRIC_LABELS[m] for m in GAP_METRICS], "top stage of the gap"]
    rows = []
    for src, g in verdict["gaps"].items():
        cells = []
        for m in GAP_METRICS:
            ci = g.get(m)
            cells.append("-" if ci is None else f"{ci['ratio']:.3f}" + (
                f" [{ci['lo']:.3f}, {ci['hi']:.3f}]" if ci.get("lo") is not None else ""))
        rows.append([src, *cells, verdict["attribution"][src]["top_stage"] or "-"])
    return head, rows


def rank_rows(report: dict) -> tuple[list[str], list[list[str]]]:
    head = ["source", "rank", "samples/s", "TFLOP/s", "visual tok/step", "vs median", "straggler steps",
            "forward ms", "flagged"]
    rows = []
    for name, st in report.get("stragglers", {}).items():
        per = report["sources"][name].get("per_rank") or []
        for pr, s in zip(st["per_rank"], per):
            rows.append([name, str(pr["rank"]), _f(s["rates"]["samples_per_s"]), _f(s["rates"]["tflops"]),
                         f"{pr['visual_tokens_per_step']:.0f}", f"{pr['relative_to_median']:.2f}",
                         f"{pr['straggler_step_fraction']:.0%}", f"{pr['forward_ms_mean']:.1f}",
                         "yes" if pr["rank"] in st["flagged"] else ""])
    return head, rows


def _tables(report: dict) -> list[tuple[str, tuple]]:
    t = [("Throughput per source", source_rows(report)), ("Workload shape", shape_rows(report)),
         ("Stage split", stage_rows(report))]
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

    names = list(report["sources"])
    sums = [report["sources"][n]["summary"] for n in names]
    gaps = (report.get("verdict") or {}).get("gaps", {})
    out = {}
    fig, axes = plt.subplots(1, 3, figsize=(13, 3.8))
    for ax, m in zip(axes, GAP_METRICS):
        vals = [s["rates"].get(m) or 0.0 for s in sums]
        real = report["sources"].get("real", {}).get("summary", {}).get("rates", {}).get(m)
        err = [[0.0] * len(names), [0.0] * len(names)]
        for i, n in enumerate(names):
            ci = gaps.get(n, {}).get(m) if gaps else None
            if ci and ci.get("lo") is not None and real:
                err[0][i] = max(vals[i] - ci["lo"] * real, 0.0)
                err[1][i] = max(ci["hi"] * real - vals[i], 0.0)
        ax.bar(names, vals, yerr=err, capsize=4, color=["#c44" if n != "real" else "#4a4" for n in names])
        ax.set_title(METRIC_LABELS[m])
        ax.tick_params(axis="x", labelrotation=20, labelsize=8)
    fig.suptitle("throughput per source (error bars: 95% bootstrap interval of the ratio to real)", fontsize=9)
    fig.tight_layout()
    out["throughput"] = _png(fig, plt)
    if any(s["stages_ms_per_sample"] for s in sums):
        out["stages"] = _stages_plot(plt, names, sums)
    if any(s["visual_tokens_per_sample"] for s in sums):
        out["visual_tokens"] = _visual_plot(plt, names, sums)
    return out


def _stages_plot(plt, names, sums) -> bytes:
    fig, ax = plt.subplots(figsize=(9, 4))
    bottom = [0.0] * len(names)
    for k in STAGE_ORDER:
        vals = [s["stages_ms_per_sample"].get(k, 0.0) for s in sums]
        if any(vals):
            ax.bar(names, vals, bottom=bottom, label=k)
            bottom = [b + v for b, v in zip(bottom, vals)]
    ax.set_ylabel("ms per sample")
    ax.set_title("stage breakdown per source")
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1, 1))
    fig.tight_layout()
    return _png(fig, plt)


def _visual_plot(plt, names, sums) -> bytes:
    fig, ax = plt.subplots(figsize=(9, 3.8))
    allv = [v for s in sums for v in s["visual_tokens_per_sample"]]
    bins = max(min(len(set(allv)), 40), 1) if allv else 10
    for n, s in zip(names, sums):
        if s["visual_tokens_per_sample"]:
            ax.hist(s["visual_tokens_per_sample"], bins=bins, range=(min(allv), max(allv) + 1), alpha=0.5,
                    label=f"{n} (n={len(s['visual_tokens_per_sample'])})")
    ax.set_xlabel("visual tokens per sample")
    ax.set_title("distribution of visual tokens per sample")
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
    keys = ("preset", "device", "steps", "warmup", "seq_length", "micro_batch_size", "seed", "logits", "real",
            "profile", "step")
    return ", ".join(f"{k} {c[k]}" for k in keys if c.get(k) is not None)


def markdown(report: dict) -> str:
    v = report.get("verdict")
    parts = ["# vlmdata audit", "", f"**{v['line']}**" if v else "_no verdict (needs real and one other source)_", "",
             f"Settings: {_settings(report)}.", "", f"Environment: {_env_line(report)}.", ""]
    for title, (head, rows) in _tables(report):
        parts += [f"## {title}", "", _md_table(head, rows), ""]
    if v and v["knobs"]:
        parts += ["## Knobs (largest first)", ""] + [f"- **{k['knob']}**: {k['message']}" for k in v["knobs"]] + [""]
    return "\n".join(parts)


def html_page(report: dict, pngs: dict[str, bytes] | None = None) -> str:
    esc = html.escape
    v = report.get("verdict")
    colour = "#b00" if v and v["status"] == "MISLEADING" else "#070"
    body = ["<h1>vlmdata audit</h1>", f"<p style='font-size:1.2em;color:{colour}'><b>{esc(v['line'])}</b></p>"
            if v else "<p><i>no verdict</i></p>", f"<p>Settings: {esc(_settings(report))}.</p>",
            f"<p>Environment: {esc(_env_line(report))}.</p>"]
    for title, (head, rows) in _tables(report):
        body.append(f"<h2>{esc(title)}</h2><table><tr>" + "".join(f"<th>{esc(h)}</th>" for h in head) + "</tr>"
                    + "".join("<tr>" + "".join(f"<td>{esc(c)}</td>" for c in r) + "</tr>" for r in rows) + "</table>")
    if v and v["knobs"]:
        body.append("<h2>Knobs (largest first)</h2><ul>" + "".join(
            f"<li><b>{esc(k['knob'])}</b>: {esc(k['message'])}</li>" for k in v["knobs"]) + "</ul>")
    for name, data in (pngs or {}).items():
        body.append(f"<h2>{esc(name.replace('_', ' '))}</h2><img alt='{esc(name)}' "
                    f"src='data:image/png;base64,{base64.b64encode(data).decode()}'>")
    style = ("body{font-family:sans-serif;margin:2em}table{border-collapse:collapse}"
             "td,th{border:1px solid #ccc;padding:3px 8px;text-align:right}td:first-child{text-align:left}")
    return (f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>vlmdata audit</title><style>{style}</style>"
            f"</head><body>{''.join(body)}</body></html>\n")


def write_report(report: dict, out_dir: str, with_plots: bool = True) -> dict[str, str]:
    """Write report.json, report.md and report.html into ``out_dir``; returns their paths."""
    os.makedirs(out_dir, exist_ok=True)
    paths = {k: os.path.join(out_dir, f"report.{k}") for k in ("json", "md", "html")}
    with open(paths["json"], "w") as f:
        json.dump(report, f, indent=1, sort_keys=True, default=str)
    with open(paths["md"], "w") as f:
        f.write(markdown(report))
    pngs = plots(report) if with_plots and report.get("sources") else None
    with open(paths["html"], "w") as f:
        f.write(html_page(report, pngs))
    return paths
