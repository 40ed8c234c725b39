"""report.md and report.html from the report dict, and ``write_report`` (the three files: json, md, html)."""

from __future__ import annotations

import base64
import html
import json

from vlmdata.audit.analysis.verdict import mock_line, proxy_line
from vlmdata.audit.logs import report_content
from vlmdata.audit.report.knob_tables import SWEEP_DEFINITIONS
from vlmdata.audit.report.plots import plots
from vlmdata.audit.report.publish import publish
from vlmdata.audit.report.tables import report_tables
from vlmdata.audit.workload.collector import describe_line


def _notes(report: dict) -> list[str]:
    """The notes beside the verdict (``report.notes``), and the stop rule in words."""
    return [*(report.get("notes") or []), *([report["stopped"]] if report.get("stopped") else [])]


def _md_table(head, rows) -> str:
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    return "\n".join(lines + ["| " + " | ".join(r) + " |" for r in rows])


def _env_line(report: dict) -> str:
    e = report.get("environment") or {}
    keys = (
        "device_name",
        "device",
        "torch",
        "transformers",
        "python",
        "cuda",
        "cpu_count",
        "cpu_model",
        "torch_threads",
    )
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
        f"({w.get('shape_batches')} warm-up batches{_vision_part(w)}, {w.get('shape_items')} shape items, "
        f"{w.get('seconds', 0):.1f} s) and {w.get('loader_steps_per_source')} untimed step(s) per source after "
        f"its loader started{_model_part(w)}; load average {_loads(report.get('environment', {}).get('load_average'))} at the "
        f"start, {_loads(m.get('load_average_end'))} at the end."
        + (f" {gc_line}" if (gc_line := describe_line(m.get("gc"))) else "")
        + _compile_line(m.get("compile"))
        + _wrap_line(m)
    )


def _vision_part(w: dict) -> str:
    n = w.get("vision_batches")
    return f" ({n} of them the vision tower alone: only their image sizes were new)" if n else ""


def _model_part(w: dict) -> str:
    k = w.get("loader_model_micro")
    return f" (the model on the last {k} micro-batches of each)" if k and w.get("loader_steps_per_source") else ""


def _wrap_line(m: dict) -> str:
    """Every step a whole global batch (the loaders wrap across epochs), and the sources repeated within one."""
    if not m.get("samples_per_step"):
        return ""
    repeated = "".join(f" {note}." for note in m.get("epoch_wrap") or [])
    return (
        f" Every step holds {m['samples_per_step']} samples per rank: an epoch's last micro-batch is completed by "
        f"the next epoch's first samples, as Megatron's datasets wrap.{repeated}"
    )


def _compile_line(c: dict | None) -> str:
    if not c:
        return ""
    what = {"all": "decoder layers and vision blocks", "decoder": "decoder layers", "vision": "vision blocks"}
    parts = str(c.get("parts"))
    by_part = c.get("by_part") or {}
    per = "".join(f"; {p} {s.get('graphs')}" for p, s in by_part.items())  # older reports have no by_part
    secs = f", {c['compile_seconds']:.1f} s compiling" if c.get("compile_seconds") is not None else ""
    return (
        f" torch.compile: {c.get('blocks')} {what.get(parts, parts)} ({c.get('graphs')} graphs{per}{secs}, "
        f"compiled during the warm-up; {c.get('graphs_in_timed_steps')} inside timed steps)."
        + "".join(f" {n}" for n in c.get("notes") or [])
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
            ("Definitions", SWEEP_DEFINITIONS),
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
    parts += [f"- Note: {n}" for n in _notes(report)] + ([""] if _notes(report) else [])
    for label, text in _head_lines(report):
        parts += [f"{label}: {text}" + ("" if text.endswith(".") else "."), ""]
    for title, (head, rows) in report_tables(report):
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
    if _notes(report):
        body.append("<ul class='notes'>" + "".join(f"<li>Note: {esc(n)}</li>" for n in _notes(report)) + "</ul>")
    body += [f"<p><b>{esc(label)}:</b> {esc(text)}</p>" for label, text in _head_lines(report)]
    for title, (head, rows) in report_tables(report):
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


STATUS_COLOURS = {"MISLEADING": "#b00", "UNDECIDED": "#b60", "OK": "#070", "DOES NOT FIT": "#b00"}
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
    """Write report.json, report.md and report.html into ``out_dir`` as one set (``publish``: temporary names
    renamed into place under the folder's lock); returns their paths."""
    pngs = plots(report) if with_plots and (report.get("sources") or report.get("kind") == "sweep") else None
    files = {
        "report.json": json.dumps(report, indent=1, sort_keys=True, default=str).encode(),
        "report.md": markdown(report).encode(),
        "report.html": html_page(report, pngs).encode(),
    }
    written = publish(out_dir, files)
    return {k: written[f"report.{k}"] for k in ("json", "md", "html")}
