"""A sweep's knob tables, shared by the terminal, report.md and report.html: each ``*_rows(report)`` returns
``(head, rows)`` with string cells (``tables`` convention); ``knob_tables(report)`` lists them with their
titles (empty for a report without ``knob_effects``: a run, a log comparison, a sweep written before them).

- ``knob_rows``: knob by source: each knob change's pooled effect on samples/s with its interval, and the
  mocks that cannot measure it (the console's table);
- ``knob_detail_rows``: every change, at each setting of the other keys and pooled, on every source:
  samples/s, non-pad tokens/s and peak memory;
- ``card_rows``: every configuration's peak memory per source and which GPU cards it fits on each; then,
  per card, each mock whose choice does not fit on real data (``cards.card_fits``' lines).
"""

from __future__ import annotations

from vlmdata.audit.analysis.knob_effects import BLIND, EFFECT_METRICS, fmt_effect
from vlmdata.audit.analysis.verdict import UNDECIDED

__all__ = ["knob_rows", "knob_detail_rows", "card_rows", "knob_tables", "KNOB_TITLE", "SWEEP_DEFINITIONS"]

SWEEP_DEFINITIONS = (
    "best set = the configurations not separable from a source's best (their throughput ratio to it has a 95% "
    "interval reaching 1; below 5 steps none is separable); a mock's regret = 1 - real throughput of a "
    "configuration of its best set / real's best, the worst of the set with its interval, infinite (oom) when it "
    "runs out of memory or does not fit on real data; the mock misleads when every one costs more than the "
    "threshold; knob effect = a figure with the knob at a value / at its baseline (its first value), at each "
    "setting of the other keys and pooled (geometric mean), with the headline's bootstrap interval; a mock cannot "
    "measure a knob when real's effect excludes no change by at least 1% and the mock measures, beyond the noise, "
    "less than half of it; Kendall tau = rank agreement of the mock's and real's throughputs over the "
    "configurations"
)
KNOB_TITLE = "Knob effects: samples/s with the knob changed vs its baseline, pooled over the other keys (95% interval)"


def _sources(effects: dict) -> list[str]:
    return list(effects["changes"][0]["sources"]) if effects.get("changes") else []


def knob_rows(report: dict) -> tuple[list[str], list[list[str]]]:
    """One row per knob change, one column per source, then what the mocks cannot measure."""
    effects = report.get("knob_effects") or {}
    names = _sources(effects)
    head = ["knob (vs baseline)", *names, "mock cannot measure it"]
    rows = []
    for ch in effects.get("changes", []):
        found = [f for f in effects.get("findings", []) if f["change"] == ch["label"]]
        blind = [f["source"] for f in found if f["state"] == BLIND]
        open_ = [f["source"] for f in found if f["state"] == UNDECIDED]
        verdict = ", ".join(blind + [f"{s} (undecided)" for s in open_]) or "-"
        cells = [fmt_effect(ch["sources"][n]["pooled"].get("samples_per_s")) for n in names]
        rows.append([ch["label"], *cells, verdict])
    return head, rows


def knob_detail_rows(report: dict) -> tuple[list[str], list[list[str]]]:
    """Every change at each setting of the other keys and pooled, on every source, for every metric."""
    effects = report.get("knob_effects") or {}
    head = ["knob", "other keys", "source", "samples/s", "non-pad tokens/s", "peak memory"]
    rows = []
    for ch in effects.get("changes", []):
        for name, e in ch["sources"].items():
            rows.append([ch["label"], "pooled", name, *[fmt_effect(e["pooled"].get(m)) for m in EFFECT_METRICS]])
            for s in e["settings"]:
                rows.append(["", s["others"], name, *[fmt_effect(s["effects"].get(m)) for m in EFFECT_METRICS]])
    return head, rows


def _peak(row: dict) -> str:
    if row["oom"]:
        return "oom"
    return "-" if row["peak_mem_gb"] is None else f"{row['peak_mem_gb']:.1f}"


def card_rows(report: dict) -> tuple[list[str], list[list[str]]]:
    """Per configuration: each source's peak GB, then per card the sources it does not fit ("all" fit)."""
    d, memory = report["decisions"], report.get("memory") or {}
    names = list(d["per_source"])
    cards = memory.get("cards") or []
    head = [
        "configuration",
        *[f"{n} peak GB" for n in names],
        *[f"{c['gb']:g} GB ({c['card']})" for c in cards],
    ]
    rows = []
    for i, lab in enumerate(d["configs"]):
        cells = [_peak(d["per_source"][n]["rows"][i]) for n in names]
        for c in cards:
            out = [n for n in names if lab not in c["fits"].get(n, [])]
            tight = [n for n in names if lab in c["tight"].get(n, [])]
            text = "all fit" if not out else "not " + ", ".join(out)
            cells.append(text + (f"; tight: {', '.join(tight)}" if tight else ""))
        rows.append([lab, *cells])
    return head, rows


def knob_tables(report: dict) -> list[tuple[str, tuple]]:
    """The sweep's knob and memory tables with their titles, in order (module docstring)."""
    if not (report.get("knob_effects") or {}).get("changes"):
        return []
    out = [
        (KNOB_TITLE, knob_rows(report)),
        (
            "Knob effects at each setting of the other keys (ratio - 1 with its 95% interval; peak memory: the "
            "largest step's)",
            knob_detail_rows(report),
        ),
    ]
    memory = report.get("memory") or {}
    if memory.get("measured"):
        out.append(("Peak memory per configuration and the GPU cards it fits", card_rows(report)))
        unfit = [
            [f"{c['gb']:g} GB ({c['card']})", name, m["line"]]
            for c in memory["cards"]
            for name, m in c["mocks"].items()
            if m.get("line")
        ]
        if unfit:
            out.append(("A mock's choice that does not fit the card on real data", (["card", "mock", "why"], unfit)))
    return out
