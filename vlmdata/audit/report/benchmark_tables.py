"""The benchmark-against-run tables of a report (``vlmdata.audit.analysis.attribution``), shared by the terminal,
report.md and report.html: every setting that differs with where each value came from, the per-GPU headline,
the factors of the gap (their product, the interaction) and the layout's composed terms with their formulas.
Each ``*_rows(report)`` returns ``(head, rows)`` or None when the report has no benchmark."""

from __future__ import annotations

from typing import Any

from vlmdata.audit.analysis.attribution import params_text
from vlmdata.audit.analysis.layout import FORMULAS, TERMS

__all__ = ["benchmark_tables"]


def _f(v: Any, fmt: str = "{:.3g}") -> str:
    return "-" if v is None else fmt.format(v)


def _ci(f: dict) -> str:
    if f.get("ratio") is None:
        return "-"
    if f.get("lo") is None:
        return f"{f['ratio']:.3f}" + ("" if f.get("measured", True) else " (modelled)")
    return f"{f['ratio']:.3f} [{f['lo']:.3f}, {f['hi']:.3f}]"


def diff_rows(report: dict) -> tuple[list[str], list[list[str]]] | None:
    b = report.get("benchmark")
    if not b:
        return None
    head = ["setting", "run", "from", "benchmark", "from", "kind"]
    rows = [
        [d["key"], str(d["run"]), d["run_source"], str(d["benchmark"]), d["benchmark_source"], d["kind"]]
        for d in b["diffs"]
    ]
    for side in ("run", "benchmark"):
        target = b[side].get("dataset_target")
        if target:
            rows.append([f"dataset ({side})", target.rsplit(".", 1)[-1], b[side].get("path") or "-", "", "", "noted"])
    return head, rows or [["(none)", "", "", "", "", ""]]


def headline_rows(report: dict) -> tuple[list[str], list[list[str]]] | None:
    attr = report.get("attribution")
    if not attr or not attr.get("mocks"):
        return None
    head = ["mock", "metric", "benchmark / GPU", "run (real) / GPU", "ratio"]
    labels = {
        "samples_per_s": "samples/s",
        "nonpad_tokens_per_s": "non-pad tokens/s",
        "tflops": "TFLOP/s (vision counted)",
        "tflops_without_vision": "TFLOP/s (vision not counted)",
    }
    rows = []
    for mock, a in attr["mocks"].items():
        for m, label in labels.items():
            h = a["headline"][m]
            ratio = _ci({**h, "measured": True}) if m == "samples_per_s" else _f(h.get("ratio"), "{:.3f}")
            rows.append([mock, label, _f(h["benchmark"]), _f(h["run"]), ratio])
        d = a["degenerate"]
        rows.append(
            [
                mock,
                "trainable parameters (reachable)",
                f"{params_text(d['benchmark']['reachable'])} of {params_text(d['benchmark']['trainable'])}",
                params_text(d["run"]["trainable"]),
                "DEGENERATE" if d["finding"] else "-",
            ]
        )
    return head, rows


def factor_rows(report: dict) -> tuple[list[str], list[list[str]]] | None:
    attr = report.get("attribution")
    if not attr or not attr.get("mocks"):
        return None
    head = ["mock", "factor", "what it means", "x (95% interval)"]
    rows = []
    for mock, a in attr["mocks"].items():
        for f in a["factors"]:
            rows.append([mock, f["factor"], f["action"], _ci(f)])
        rows.append([mock, "product", "the whole per-GPU gap", _f(a["product"], "{:.3f}")])
        inter = a.get("interaction")
        rows.append(
            [
                mock,
                "interaction (not in the product)",
                "data factor under the benchmark's configuration / under the run's",
                _f(inter, "{:.3f}") if inter is not None else "not measured",
            ]
        )
    return head, rows


def layout_rows(report: dict) -> tuple[list[str], list[list[str]]] | None:
    attr = report.get("attribution")
    if not attr or not attr.get("mocks"):
        return None
    head = [
        "measured name",
        "e (efficiency)",
        *TERMS,
        "b (expert imbalance)",
        "e at b = " + " / ".join(("1.0", "1.1", "1.25", "1.5")),
    ]
    rows, seen = [], set()
    for a in attr["mocks"].values():
        for name, lay in a["layout"].items():
            if name in seen:
                continue
            seen.add(name)
            sens = " / ".join(_f(v, "{:.3f}") for v in lay["sensitivity"].values())
            terms = [_f(lay["terms"][t], "{:.3f}") for t in TERMS]
            rows.append([name, _f(lay["efficiency"], "{:.3f}"), *terms, _f(lay["imbalance"], "{:.2f}"), sens])
    rows += [[f"formula: {t}", FORMULAS[t], "", "", "", "", "", ""] for t in TERMS]
    return head, rows


def benchmark_tables(report: dict) -> list[tuple[str, tuple]]:
    """The benchmark's tables, in order (none without a benchmark)."""
    out = []
    for title, fn in (
        ("Benchmark against the run, per GPU", headline_rows),
        (
            "The gap, factor by factor (product = the gap; data first, then each setting on the mock's data)",
            factor_rows,
        ),
        ("Settings that differ (measured: changes the step; composed: the layout; noted: not reproduced)", diff_rows),
        ("Layouts composed from one GPU's step (vlmdata.audit.analysis.layout)", layout_rows),
    ):
        rows = fn(report)
        if rows is not None:
            out.append((title, rows))
    return out
