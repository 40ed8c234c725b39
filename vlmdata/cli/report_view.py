"""An audit report on the terminal: one printer for every kind (an audit run, a sweep, a comparison of two
training logs), and the exit code of its verdict.

``show_report(report, paths, as_json=..., quiet=...)``: with ``as_json`` the report without per-step records;
else the report's lines (a log comparison's workload, images and logs), its summary table (a run: one row per
source; a sweep: every configuration, the decisions and the knob effects; logs: per iteration and the gaps)
unless ``quiet``, the verdict in its colour (parameters shown as flags) with its first three knobs (a
sweep: its notes), notes and straggler ranks on stderr, and the files written. ``exit_code(verdict)``: 0 OK (or no verdict), 3 MISLEADING, 4 UNDECIDED.
"""

from __future__ import annotations

from rich import box
from rich.markup import escape
from rich.table import Table

from vlmdata.audit.logs import report_content
from vlmdata.audit.report import decision_rows, sweep_rows
from vlmdata.audit.report.knob_tables import knob_rows
from vlmdata.cli.args import cli_flags
from vlmdata.cli.console import EXIT_MISLEADING, EXIT_OK, EXIT_UNDECIDED, err, out, print_json, table

__all__ = ["show_report", "exit_code", "run_table"]

COLOURS = {"MISLEADING": "bold red", "UNDECIDED": "bold yellow"}


def exit_code(verdict: dict | None) -> int:
    """0 OK (or no verdict), 3 MISLEADING, 4 UNDECIDED (``vlmdata audit --help``)."""
    status = (verdict or {}).get("status")
    return EXIT_MISLEADING if status == "MISLEADING" else EXIT_UNDECIDED if status == "UNDECIDED" else EXIT_OK


def _without_records(report: dict) -> dict:
    if "sources" not in report:
        return report
    sources = {k: {kk: vv for kk, vv in v.items() if kk != "records"} for k, v in report["sources"].items()}
    return {**report, "sources": sources}


def show_report(report: dict, paths: dict[str, str] | None = None, *, as_json: bool = False, quiet: bool = False):
    """Print ``report`` (module docstring); ``paths``: the files written, if any."""
    if as_json:
        print_json(_without_records(report))
        return
    logs = report.get("kind") == "logs"
    content = report_content(report) if logs else None
    if content is not None:  # a log comparison: its lines and tables, also with -q
        for label, text in content["lines"]:
            if label != "Note":
                out.print(f"[bold]{label}:[/] {escape(text)}", soft_wrap=True)
        for title, head, rows in content["tables"]:
            out.print(table(title, head, rows))
    elif not quiet and report.get("kind") == "sweep":
        tables = [("configurations", sweep_rows(report)), ("decisions", decision_rows(report))]
        if (report.get("knob_effects") or {}).get("changes"):  # knob x source (sweeps since issue 36)
            tables.append(("knob effects: samples/s vs the baseline, pooled (95% interval)", knob_rows(report)))
        for title, (head, rows) in tables:
            out.print(table(title, head, rows))
    elif not quiet:
        out.print(run_table(report))
    _verdict(report.get("verdict"))
    for label, text in content["lines"] if content else []:
        if label == "Note":
            err.print(f"[yellow]note:[/] {escape(text)}", soft_wrap=True)
    for name, st in (report.get("stragglers") or {}).items():
        if st["flagged"]:
            err.print(
                f"[yellow]straggler ranks on {name}:[/] {st['flagged']} "
                f"(visual-token imbalance {st['visual_imbalance']:.2f}x)"
            )
    if paths:
        wall = f"  ({report['wall_s']:.0f} s)" if "wall_s" in report else ""
        out.print(f"report: {', '.join(paths.values())}{wall}", soft_wrap=True, markup=False)


def _verdict(v: dict | None) -> None:
    if not v:
        return
    colour = COLOURS.get(v.get("status") or "", "bold green")
    out.print(f"[{colour}]{escape(cli_flags(v['line']))}[/]", soft_wrap=True)
    for k in (v.get("knobs") or [])[:3]:
        out.print(f"  - {k['message']}", soft_wrap=True, markup=False, highlight=False)
    for note in v.get("notes") or []:  # a sweep's: the mocks' choices that do not fit a GPU card on real data
        out.print(f"  - {cli_flags(note)}", soft_wrap=True, markup=False, highlight=False)


def run_table(report: dict) -> Table:
    """One row per source of an audit run: steps, step ms, rates, the ratio to real, data wait, padding."""
    v = report.get("verdict") or {}
    gaps = v.get("gaps", {})
    cfg = report.get("config", {})
    title = (
        f"vlmdata audit: {report['workload']['name']} on {cfg.get('device')}, "
        f"micro-batch {cfg.get('micro_batch_size')} x {cfg.get('micro_batches')} per optimizer step (GBS "
        f"{cfg.get('global_batch_size')}), seq {cfg.get('seq_length')}, "
        f"{((report.get('run') or {}).get('run') or {}).get('padding_rule', '')}"
        + (f" x {report['world_size']} ranks" if report.get("world_size", 1) > 1 else "")
    )
    t = Table(
        title=title,
        box=box.SIMPLE_HEAD,
        padding=(0, 1),
        pad_edge=False,
        show_edge=False,
        caption="vs real: samples/s ratio; wait: data-wait share of step time; pad: padding share of tokens; "
        "non-pad tok: text + visual tokens",
    )
    for c in ("source", "steps", "step ms", "samples/s", "non-pad tok/s", "TFLOP/s", "vs real", "wait", "pad"):
        t.add_column(c, justify="left" if c == "source" else "right", no_wrap=True)
    for name, src in report["sources"].items():
        s = src["summary"]
        if s is None:  # ran out of memory
            t.add_row(name, "0", "out of memory", *["-"] * 6)
            continue
        g = gaps.get(name, {}).get("samples_per_s")
        t.add_row(
            name,
            str(s["steps"]),
            f"{s['step_ms']['median']:.0f}",
            _f(s["rates"]["samples_per_s"]),
            _f(s["rates"].get("nonpad_tokens_per_s")),
            _f(s["rates"]["tflops"]),
            "1" if name == "real" else ("-" if not g else f"{g['ratio']:.2f}x"),
            _f(s.get("data_wait_fraction"), "{:.1%}"),
            _f(s["shape"].get("padding_fraction"), "{:.0%}"),
        )
    return t


def _f(x, fmt: str = "{:.3g}") -> str:
    return "-" if x is None else fmt.format(x)
