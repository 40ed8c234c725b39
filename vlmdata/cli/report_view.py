"""An audit report on the terminal: one printer for every kind (an audit run, a sweep, a comparison of two
training logs), and the exit code of its verdict.

``show_report(report, paths, as_json=..., quiet=...)``: with ``as_json`` the report without per-step records;
else the report's lines (a log comparison's workload, images and logs), its summary table (a run: one row per
source; a sweep: every configuration, the decisions and the knob effects; logs: per iteration and the gaps)
unless ``quiet``, the verdict in its colour (parameters shown as flags) with its first three knobs (a
sweep: its notes), notes and straggler ranks on stderr, and the files written. ``exit_code(verdict)``: 0 OK (or no verdict), 3 MISLEADING, 4 UNDECIDED, 1 DOES NOT FIT.
"""

from __future__ import annotations

from rich import box
from rich.markup import escape
from rich.table import Table

from vlmdata.audit.analysis.verdict import DOES_NOT_FIT
from vlmdata.audit.logs import report_content
from vlmdata.audit.report import decision_rows, sweep_rows
from vlmdata.audit.report.knob_tables import knob_rows
from vlmdata.cli.args import cli_flags
from vlmdata.cli.console import EXIT_FAIL, EXIT_MISLEADING, EXIT_OK, EXIT_UNDECIDED, err, out, print_json, table

__all__ = ["show_report", "exit_code", "run_table", "show_plan"]

COLOURS = {"MISLEADING": "bold red", "UNDECIDED": "bold yellow", DOES_NOT_FIT: "bold red"}


def exit_code(verdict: dict | None) -> int:
    """0 OK (or no verdict), 3 MISLEADING, 4 UNDECIDED, 1 DOES NOT FIT (``vlmdata audit --help``)."""
    status = (verdict or {}).get("status")
    codes = {"MISLEADING": EXIT_MISLEADING, "UNDECIDED": EXIT_UNDECIDED, DOES_NOT_FIT: EXIT_FAIL}
    return codes.get(str(status), EXIT_OK)


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
    for note in [*(report.get("notes") or []), *([report["stopped"]] if report.get("stopped") else [])]:
        err.print(f"[yellow]note:[/] {escape(cli_flags(note))}", soft_wrap=True)
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
    title = (  # short enough not to wrap mid-phrase; the padding rule goes under the table
        f"vlmdata audit: {report['workload']['name']} on {cfg.get('device')}, MBS {cfg.get('micro_batch_size')} x "
        f"{cfg.get('micro_batches')}/step (GBS {cfg.get('global_batch_size')}), seq {cfg.get('seq_length')}"
        + (f", {report['world_size']} ranks" if report.get("world_size", 1) > 1 else "")
    )
    padding = ((report.get("run") or {}).get("run") or {}).get("padding_rule")
    t = Table(
        title=title,
        box=box.SIMPLE_HEAD,
        padding=(0, 1),
        pad_edge=False,
        show_edge=False,
        caption=(f"padding: {padding}. " if padding else "")
        + "vs real: samples/s ratio; wait: data-wait share of step time; pad: padding share of tokens; "
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


def _cell(v) -> str:
    if isinstance(v, float):
        return f"{v:g}"
    return "-" if v is None else str(v)


def _clock(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    if seconds < 120:
        return f"{seconds:.0f} s"
    return f"{seconds / 60:.1f} min" if seconds < 7200 else f"{seconds / 3600:.1f} h"


def show_plan(plan: dict) -> None:
    """The audit's plan (``vlmdata.audit.phases.preview``) on stderr: the settings and where each came from (both sides
    with a benchmark, and what differs), the arms, the model and the measured part with parameter counts and
    estimated memory, the expected steps and times, the budget and the stop rule, the notes."""
    rows = [[_name(r), _cell(r["value"]), r["from"]] for r in plan["settings"]]
    err.print(table("audit plan: the run (every setting and where it came from)", ["setting", "value", "from"], rows))
    bench = plan.get("benchmark")
    if bench:
        err.print(table("the benchmark beside the run", *_benchmark_rows(bench)))
    err.print(f"measured: {', '.join(plan['arms'])}", soft_wrap=True, markup=False, highlight=False)
    for line in _plan_lines(plan):
        err.print(escape(cli_flags(line)), soft_wrap=True, highlight=False)
    for note in plan.get("notes") or []:
        err.print(f"[yellow]note:[/] {escape(cli_flags(note))}", soft_wrap=True)


def _name(row: dict) -> str:
    """A setting as the user sets it: its flag when it is one, else its name in words."""
    return cli_flags(f"`{row['setting']}`") if row.get("param") else row["setting"].replace("_", " ")


def _benchmark_rows(bench: dict) -> tuple[list[str], list[list[str]]]:
    run, b = bench["run"], bench["benchmark"]
    diffs = {d["key"]: d for d in bench.get("diffs") or []}
    keys = list(dict.fromkeys([*run["sources"], *b["sources"]]))
    rows = []
    for k in keys:
        rv = run["run"].get(k, run["execution"].get(k))
        bv = b["run"].get(k, b["execution"].get(k))
        kind = diffs[k]["kind"] if k in diffs else ""
        rows.append(
            [k.replace("_", " "), _cell(rv), run["sources"].get(k, "-"), _cell(bv), b["sources"].get(k, "-"), kind]
        )
    for lk in bench.get("links") or []:
        rows.append([f"link {lk['name']}", ", ".join(lk["keys"]), "", lk["action"], "", "measured"])
    return ["setting", "run", "from", "benchmark", "from", "differs"], rows


def _plan_lines(plan: dict) -> list[str]:
    m, fit = plan["model"], plan.get("measured") or {}
    lines = [
        f"padding: {plan['padding_rule']}",
        f"model: {m['name']} ({m['family']}), {m['params']['total'] / 1e9:.2f}B parameters in all",
    ]
    if fit:
        p = fit["params"]
        part = f"{fit['layers']} of {m['layers']} decoder layers" if fit.get("layers") else "the whole model"
        experts = f", {fit['experts']} experts per layer" if fit.get("experts") else ""
        lines.append(
            f"measured on {plan['device']}: {part}{experts}: {p['total'] / 1e9:.2f}B parameters, "
            f"{p['trainable'] / 1e6:.1f}M trained"
        )
    if plan.get("memory_line"):
        lines.append(f"memory: {plan['memory_line']}")
    if fit.get("refusal"):
        lines.append(f"refused: {fit['refusal']}")
    st, t = plan["steps"], plan.get("times")
    lines.append(f"steps per source: {st['min']} ({st['min_why']}) to {st['max']} (`max_steps`)")
    if t:
        lines.append(
            f"expected (rough): {t['expected_steps']} steps per source; model build ~{_clock(t['model_build_s'])}, "
            f"census ~{_clock(t['census_s'])}, warm-up ~{_clock(t['warmup_s'])}, a round ~{_clock(t['round_s'])} "
            f"(every source at real's FLOPs: mocks are faster); in all ~{_clock(t['total_s'])}"
        )
    if plan.get("budget"):
        lines.append(f"budget: {plan['budget']['line']}")
    lines.append(f"stop rule: {plan['stop_rule']}")
    lines.append(f"(planned in {plan['plan_seconds']:.1f} s, nothing built)")
    return lines
