"""What a report of two logs shows (the terminal, report.md and report.html): ``report_content(report)``.

Logs carry no environment, stage times or visual-token counts, so a report of logs has none of those
sections: its lines (workload, images, each log, notes), its tables (per iteration, the gaps) and the rates
both logs measured (the one plot).
"""

from __future__ import annotations

from vlmdata.audit.analysis.verdict import GAP_METRICS, METRIC_LABELS


def _f(v, fmt: str = "{:.3g}") -> str:
    return "-" if v is None else fmt.format(v)


def _ci(ci: dict | None) -> str:
    if ci is None:
        return "-"
    return f"{ci['ratio']:.3f}" + (f" [{ci['lo']:.3f}, {ci['hi']:.3f}]" if ci.get("lo") is not None else "")


def _model_text(model: dict) -> str:
    if not model:
        return "not printed in the logs (not checked)"
    return ", ".join(f"{k} {v}" for k, v in model.items())


def report_content(report: dict) -> dict:
    """What a report of a log comparison shows, for the terminal, report.md and report.html.

    Args:
        report: ``compare_logs``' result.

    Returns:
        ``{"lines": [(label, text)], "tables": [(title, head, rows)], "plot_metrics": [metric]}``: every
        line and table non-empty; ``plot_metrics`` the rates (of ``GAP_METRICS``) both logs measured, the
        only plot a log comparison has (no environment, stage split or visual tokens: logs carry none).
    """
    srcs, gaps = report["sources"], (report.get("verdict") or {}).get("gaps", {})
    lines = _lines(report)
    head = ["source", "ms/iteration", "p10-p90", "samples/s", "tokens/s", "TFLOP/s/GPU", "vs real"]
    rows = []
    for name in ("mock", "real"):
        s = srcs[name]["summary"]
        st = s["step_ms"]
        g = gaps.get(name, {}).get("samples_per_s") or gaps.get(name, {}).get("tflops")
        rows.append(
            [
                name,
                f"{st['median']:.1f}",
                f"{st['p10']:.0f}-{st['p90']:.0f}",
                _f(s["rates"]["samples_per_s"]),
                _f(s["rates"]["tokens_per_s"]),
                _f(s["rates"]["tflops"]),
                "1" if name == "real" else ("-" if not g else f"{g['ratio']:.2f}x"),
            ]
        )
    tables = [("Per iteration, after warm-up (median of logged intervals)", head, rows)]
    metrics = [m for m in GAP_METRICS if all(srcs[n]["summary"]["rates"].get(m) for n in ("mock", "real"))]
    if gaps:
        tables.append(
            (
                "mock/real gaps (95% CI)",
                ["source / real", *[METRIC_LABELS[m] for m in metrics]],
                [[src, *[_ci(g.get(m)) for m in metrics]] for src, g in gaps.items()],
            )
        )
    if report.get("settings"):
        tables.append(
            (
                "Settings the runs differ in (from: the log's dump or the given Bridge config)",
                ["setting", "mock", "from", "real", "from", "what it changes"],
                [
                    [d["key"], d["mock"], d["mock_from"], d["real"], d["real_from"], d["meaning"]]
                    for d in report["settings"]
                ],
            )
        )
    return {"lines": lines, "tables": tables, "plot_metrics": metrics}


def _lines(report: dict) -> list[tuple[str, str]]:
    """(label, text): the workload, the image evidence, each log, the notes."""
    w, srcs = report["workload"], report["sources"]
    img = w["images"]
    found = [f"{k}: {e}" for k, e in img["evidence"].items() if e]
    known = [
        f"{label} {w[k]}"
        for label, k in (
            ("global batch size", "global_batch_size"),
            ("seq_length", "seq_length"),
            ("GPUs", "world_size"),
        )
        if w.get(k) is not None
    ]
    lines = [
        (
            "Workload",
            (", ".join(known) or "global batch size and seq_length not in the logs")
            + f"; model: {_model_text(w['model'])}",
        ),
        (
            "Images",
            ("yes (" + "; ".join(found) + ")")
            if img["present"]
            else "no image information in the logs: a text-only run as far as the logs tell (no VLM-specific advice)",
        ),
    ]
    for name in ("mock", "real"):
        i = srcs[name]["log"]
        lines.append(
            (
                f"{name} log",
                f"{i['path']} ({i['format']}): kept {i['kept_intervals']} of {i['logged_lines']} "
                f"logged intervals, iterations {i['first_kept']}-{i['last_kept']} ({i['iterations']}), "
                f"warm-up {i['warmup_iterations']}"
                + (f"; {i['restarts']} restart(s), last run kept" if i["restarts"] else "")
                + (
                    f"; {i['skipped_iterations']} skipped, {i['nan_iterations']} NaN iterations"
                    if i["skipped_iterations"] or i["nan_iterations"]
                    else ""
                ),
            )
        )
    return lines + [("Note", n) for n in report.get("notes") or []]
