"""vlmdata compare A B: two profiles, datasets or sources (a side that is not a profile is profiled now, read with the
source flags ``vlmdata profile`` has), KS distances and medians per metric, PASS/FAIL, exit 1 when one fails."""

from __future__ import annotations

import argparse
import dataclasses

from rich.table import Table

from vlmdata.cli.console import EXIT_FAIL, EXIT_OK, UserError, err, out, print_json, progress
from vlmdata.cli.source_args import add_source_args, source_request
from vlmdata.profile.compare import (
    DEFAULT_THRESHOLDS,
    METRICS,
    Thresholds,
    compare,
    is_profile_file,
    load_side,
    options_from,
    side_summary,
)
from vlmdata.profile.measure import ProfileOptions, check_outputs


def add_parser(sub):
    p = sub.add_parser(
        "compare",
        help="KS distances and medians of two datasets or profiles, PASS/FAIL per metric",
        description=(
            "Fidelity of B to A (A = reference, usually real data; B = candidate, usually synthetic). Each of A and B is\n"
            "a profile.json or a dataset/source (profiled now, with the model and pixel limits of the other side when\n"
            "that is a profile). Per metric: two-sample Kolmogorov-Smirnov distance and medians side by side, PASS/FAIL\n"
            "against a threshold; decode time by the ratio of medians B/A. Exit 1 when a metric fails.\n"
            "Default thresholds: "
            + ", ".join(f"{k} {v}" for k, v in DEFAULT_THRESHOLDS.items())
            + ", decode_ms_per_image ratio 0.9,1.1."
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("a", help="reference: profile.json or dataset folder")
    p.add_argument("b", help="candidate: profile.json or dataset folder")
    p.add_argument(
        "-t",
        "--threshold",
        action="append",
        default=[],
        metavar="METRIC=VALUE",
        help="override a KS threshold (e.g. bytes_per_image=0.2) or the decode ratio range "
        "(decode_ms_per_image=0.8,1.2); repeatable. Metrics: " + ", ".join(METRICS),
    )
    p.add_argument("--model", help="model for profiling a dataset side (default: the other side's, else qwen3-vl)")
    p.add_argument("--tokenizer", help="tokenizer folder for profiling a dataset side")
    p.add_argument("--plot", help="write overlaid histograms of A and B to this PNG")
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    add_source_args(p, shards=True)  # how a source side is read, as `vlmdata profile` reads it
    return p


def _opts(ref: dict | None, args) -> ProfileOptions:
    """How a dataset or source side is profiled: the other side's model and limits (when it is a profile), the
    source flags (``cli.source_args``: the same request ``vlmdata profile`` would make)."""
    o = options_from(ref, args.tokenizer) if ref else ProfileOptions(tokenizer=args.tokenizer)
    o = dataclasses.replace(o, source=source_request(args))
    return dataclasses.replace(o, model=args.model) if args.model else o


def run(args) -> int:
    th = Thresholds()
    try:
        for t in args.threshold:
            th.set(t)
    except ValueError as e:
        raise UserError(str(e)) from None
    check_outputs(None, args.plot, inputs=[args.a, args.b])  # before profiling: never over an input
    profiles = is_profile_file(args.a) and is_profile_file(args.b)  # nothing to profile: no progress
    with progress("compare: profiling", unit="samples", quiet=args.quiet or args.json or profiles) as advance:
        pa = pb = None
        if is_profile_file(args.a):
            pa, ka = load_side(args.a)
        if is_profile_file(args.b):
            pb, kb = load_side(args.b)
        if pa is None:
            pa, ka = load_side(args.a, _opts(pb, args), advance)
        if pb is None:
            pb, kb = load_side(args.b, _opts(pa, args), advance)
    res = compare(pa, pb, th)
    if args.plot:
        # imported when the command runs: `vlmdata --help` and this command's --help stay light
        from vlmdata.profile.plots import plot_profiles

        plot_profiles([pa, pb], args.plot, ["A " + args.a, "B " + args.b], title="vlmdata compare")
    res["a"], res["b"] = side_summary(args.a, ka, pa), side_summary(args.b, kb, pb)
    if args.json:
        print_json(res)
    else:  # -q hides progress only, never the table and the verdict
        t = Table(title=f"A {args.a}  vs  B {args.b}")
        for c in ("metric", "median A", "median B", "B/A", "KS", "threshold", "result"):
            t.add_column(c, justify="left" if c in ("metric", "result") else "right", no_wrap=True)
        for r in res["metrics"]:
            fmt = _num
            th_txt = (
                "-"
                if r["threshold"] is None
                else f"{r['threshold'][0]:g}-{r['threshold'][1]:g}"
                if isinstance(r["threshold"], list)
                else f"<={r['threshold']:g}"
            )
            colour = {"PASS": "green", "FAIL": "bold red", "SKIP": "yellow"}[r["status"]]
            t.add_row(
                LABELS.get(r["metric"], r["metric"]),
                fmt(r["median_a"]),
                fmt(r["median_b"]),
                _f3(r["ratio"]),
                _f3(r["ks"]),
                th_txt,
                f"[{colour}]{r['status']}[/]" + (f" ({r['note']})" if r.get("note") else ""),
            )
        out.print(t)
        for w in res["warnings"]:
            err.print(f"[yellow]warning:[/] {w}", soft_wrap=True)
        out.print(
            "[green]PASS[/]"
            if res["passed"]
            else "[bold red]FAIL[/]: " + ", ".join(r["metric"] for r in res["metrics"] if r["status"] == "FAIL")
        )
    return EXIT_OK if res["passed"] else EXIT_FAIL


LABELS = {
    "pixels_per_image": "pixels/image",
    "aspect_ratio": "aspect W/H",
    "bytes_per_image": "bytes/image",
    "visual_tokens_per_sample": "visual tok/sample",
    "text_tokens_per_sample": "text tok/sample",
    "images_per_sample": "images/sample",
    "decode_ms_per_image": "decode ms/image",
}


def _f3(v) -> str:
    return "-" if v is None else f"{v:.3f}"


def _num(v) -> str:
    if v is None:
        return "-"
    a = abs(v)
    if a >= 1e6:
        return f"{v / 1e6:.3g}M"
    if a >= 1e4:
        return f"{v / 1e3:.1f}k"
    return f"{v:.4g}"
