"""The report's tables, shared by the terminal, report.md and report.html: each ``*_rows(report)`` returns
``(head, rows)`` with string cells; ``report_tables(report)`` lists the ones a report of its kind shows (a run,
a sweep, a log comparison), in order."""

from __future__ import annotations

from vlmdata.audit.analysis.metrics import STAGE_ORDER
from vlmdata.audit.analysis.verdict import GAP_METRICS, METRIC_LABELS
from vlmdata.audit.logs import report_content
from vlmdata.audit.report.benchmark_tables import benchmark_tables
from vlmdata.audit.report.knob_tables import knob_tables
from vlmdata.audit.report.run_tables import (
    composition_rows,
    run_rows,
    stage_efficiency_rows,
    straggler_check_rows,
    straggler_rows,
)

RATE_COLUMNS = [
    ("samples_per_s", "samples/s"),
    ("images_per_s", "images/s"),
    ("nonpad_tokens_per_s", "non-pad tok/s"),
    ("loss_tokens_per_s", "loss tok/s"),
    ("visual_tokens_per_s", "visual tok/s"),
    ("tflops", "TFLOP/s/GPU"),
]


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
    """One row per configuration: each source's samples/s (or oom) and peak memory; '*' = does not fit,
    '=' = in the source's best set (not separable from its best)."""
    d = report["decisions"]
    names = list(d["per_source"])
    head = ["configuration", *[f"{n} samples/s" for n in names], *[f"{n} peak GB" for n in names]]
    rows = []
    for i, lab in enumerate(d["configs"]):
        cells = [d["per_source"][n]["rows"][i] for n in names]
        best = [lab in d["per_source"][n].get("best_set", ()) for n in names]
        rate = [
            "oom" if c["oom"] else (_f(c["samples_per_s"]) + ("" if c["fits"] else " *") + (" =" if b else ""))
            for c, b in zip(cells, best)
        ]
        rows.append([lab, *rate, *[_f(c["peak_mem_gb"], "{:.1f}") for c in cells]])
    return head, rows


def decision_rows(report: dict) -> tuple[list[str], list[list[str]]]:
    d = report["decisions"]
    head = [
        "mock",
        "its best (set)",
        "real's best (set)",
        "same",
        "Kendall tau (vs real)",
        "regret (real throughput lost, worst of its set)",
        "state",
    ]
    rows = []
    for name, m in d["mocks"].items():
        rows.append(
            [
                name,
                ", ".join(m.get("choice_set") or [m["choice"] or "-"]),
                ", ".join(m.get("real_set") or [m["real_best"] or "-"]),
                m.get("agreement") or ("yes" if m["same"] else "no"),
                _f(m["kendall_tau"], "{:.2f}"),
                _regret_cell(m),
                m.get("state") or "-",
            ]
        )
    return head, rows


def _regret_cell(m: dict) -> str:
    regret = m["regret"]
    if regret is None:
        return "-"
    if regret == float("inf"):
        worst = next((r for r in m.get("regrets") or [] if r["regret"] == regret), None)
        return str(m["choice_on_real"]) if worst is None else f"{worst['on_real']} ({worst['config']})"
    text, lo, hi = f"{regret:.1%}", m.get("regret_lo"), m.get("regret_hi")
    if lo is None or hi is None:
        return text
    bounds = f"{round(lo, 9):.1%}", f"{round(hi, 9):.1%}"
    return text + ("" if bounds == (text, text) else f" [{bounds[0]}, {bounds[1]}]")  # exact: no interval


def report_tables(report: dict) -> list[tuple[str, tuple]]:
    if report.get("kind") == "logs":
        return [(title, (head, rows)) for title, head, rows in report_content(report)["tables"]]
    if report.get("kind") == "sweep":
        lim = report["decisions"].get("memory_limit_gb")
        return [
            ("Decisions: each mock's best configuration on real data", decision_rows(report)),
            (
                "Every configuration on every source (= : in the source's best set"
                + (f"; * = peak memory over {lim} GB)" if lim else ")"),
                sweep_rows(report),
            ),
            *knob_tables(report),
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
    if (report.get("verdict") or {}).get("gaps"):  # none when real ran out of memory: no gap was measured
        t.insert(1, ("Gaps (ratio to real, 95% bootstrap interval)", gap_rows(report["verdict"])))
    t[1:1] = benchmark_tables(report)
    if report.get("stragglers"):
        t.append(("Per rank", rank_rows(report)))
    return t
