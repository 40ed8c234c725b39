"""vlmdata build SOURCE -o OUT"""

from __future__ import annotations

import argparse
import os

from rich.table import Table

from vlmdata import storage
from vlmdata.cli.args import cli_flags, parse_size, positive_int
from vlmdata.cli.console import EXIT_FAIL, EXIT_OK, UserError, counts, err, human_bytes, out, print_json, progress
from vlmdata.cli.source_args import add_source_args, source_request
from vlmdata.ingest import DEFAULT_MIN_WRITTEN_FRACTION, BuildOptions, build, build_shortfall
from vlmdata.ingest.engines import DEFAULT_ENGINE, ENGINES
from vlmdata.ingest.options import DEFAULT_ENERGON_TARGET, ENERGON_TARGETS, VERIFY_MODES


def _fraction(text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number between 0 and 1") from None
    if not 0 <= v <= 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number between 0 and 1")
    return v


def _size(n: int) -> str:
    """A byte count as the flag takes it (``512MiB``)."""
    for unit, name in ((1 << 30, "GiB"), (1 << 20, "MiB"), (1 << 10, "KiB")):
        if n % unit == 0:
            return f"{n // unit}{name}"
    return str(n)


def add_parser(sub):
    d = BuildOptions()  # every default is the library's
    p = sub.add_parser(
        "build",
        help="build WebDataset shards from real image-text data",
        description=(
            "Turn a folder of images with caption sidecars, LLaVA JSON/JSONL, HF messages JSONL or a local Hugging Face\n"
            "dataset into tar shards (original image bytes + KEY.json), manifest.json with exact accounting of\n"
            "every input, and Energon metadata (.nv-meta) that Megatron Bridge reads."
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    _input_args(p, d)
    _shard_args(p, d)
    _run_args(p, d)
    return p


def _input_args(p, d: BuildOptions) -> None:
    """SOURCE, -o OUT and how the source is read (the flags ``vlmdata profile`` shares: ``cli.source_args``)."""
    p.add_argument(
        "source",
        help="folder, .json/.jsonl file, .parquet file or saved HF dataset folder; folders and "
        "JSON files may be fsspec URLs (s3://bucket/prefix, file://...)",
    )
    p.add_argument(
        "-o",
        "--out",
        required=True,
        help="output folder or URL such as s3://bucket/prefix (must be empty unless --resume/--overwrite)",
    )
    add_source_args(p)


def _shard_args(p, d: BuildOptions) -> None:
    """The shards, the image checks and the shortfall bar."""
    p.add_argument("--prefix", default=d.prefix, help=f"shard file name prefix (default: {d.prefix})")
    p.add_argument(
        "--max-count", type=positive_int, default=d.max_count, help=f"samples per shard at most (default {d.max_count})"
    )
    p.add_argument(
        "--max-size",
        type=parse_size,
        default=d.max_size or 0,
        help="bytes per shard at most, tar headers and padding included "
        f"(default {_size(d.max_size) if d.max_size else 'no limit'}; 0 = no limit)",
    )
    p.add_argument(
        "--max-pixels", type=positive_int, help="re-encode images above this many pixels (default: never re-encode)"
    )
    p.add_argument(
        "--max-image-pixels",
        type=positive_int,
        default=d.max_image_pixels,
        help="skip images above this many pixels as decompression bombs",
    )
    p.add_argument(
        "--min-written-fraction",
        type=_fraction,
        default=DEFAULT_MIN_WRITTEN_FRACTION,
        help="exit 1 when fewer than this fraction of the inputs were written "
        f"(default {DEFAULT_MIN_WRITTEN_FRACTION:g}; 0 = off; writing nothing always exits 1)",
    )
    p.add_argument(
        "--verify",
        choices=VERIFY_MODES,
        default=d.verify,
        help="image check while building: header + end marker (fast), or full decode",
    )


def _run_args(p, d: BuildOptions) -> None:
    """Where the work runs, how OUT is written, what is printed."""
    p.add_argument(
        "--workers",
        type=positive_int,
        default=d.workers,
        help="worker processes, or CPUs of the local Ray instance (default: auto: one process unless "
        "the per-input work is heavy (--verify full, --max-pixels, remote source) and a core is free; "
        "all cores for Ray)",
    )
    p.add_argument(
        "--engine",
        choices=ENGINES,
        default=DEFAULT_ENGINE,
        help="where per-chunk and per-shard work runs: local processes or Ray tasks (same output)",
    )
    p.add_argument(
        "--address",
        help="with --engine ray: an existing Ray cluster ('auto', 'ray://head:10001'); "
        "default: start a local Ray instance",
    )
    p.add_argument(
        "--staging",
        help="with a remote --out: local folder where shards are written before upload "
        "(default: under $VLMDATA_STAGING or the temp dir, stable per OUT for --resume)",
    )
    p.add_argument(
        "--fsync",
        action="store_true",
        help="flush each shard to disk before renaming it (durable across power loss; slower)",
    )
    g = p.add_mutually_exclusive_group()
    g.add_argument("--resume", action="store_true", help="finish an interrupted build in OUT")
    g.add_argument(
        "--overwrite",
        action="store_true",
        help="replace the vlmdata dataset in OUT (never the source, "
        "never a folder that is not a dataset; only after the new source has been read)",
    )
    p.add_argument(
        "--energon-target",
        choices=ENERGON_TARGETS,
        default=DEFAULT_ENERGON_TARGET,
        help="class named in .nv-meta/dataset.yaml: vlmdata's (Bridge's own where installed) or Bridge's directly",
    )
    p.add_argument("--json", action="store_true", help="print the manifest summary as JSON")


def run(args) -> int:
    with storage.redacting():
        return _run(args)


def _run(args) -> int:
    opts = BuildOptions(
        prefix=args.prefix,
        max_count=args.max_count,
        max_size=args.max_size or None,
        max_pixels=args.max_pixels,
        max_image_pixels=args.max_image_pixels,
        verify=args.verify,
        source=source_request(args),
        workers=args.workers,
        fsync=args.fsync,
    )
    if args.address and args.engine != "ray":
        raise UserError("--address is for --engine ray")
    with progress("build", unit="inputs", quiet=args.quiet or args.json) as advance:  # errors: vlmdata.cli.main
        m = build(
            args.source,
            args.out,
            opts,
            resume=args.resume,
            overwrite=args.overwrite,
            progress=advance,
            energon_target=args.energon_target,
            engine=args.engine,
            address=args.address,
            staging=args.staging,
        )
    acc = m["accounting"]
    for s in acc["skipped_samples"]:
        err.print(f"skipped {s['input']}: {s['reason']}: {s['detail']}", soft_wrap=True, markup=False)
    shown = storage.redact(args.out) if storage.is_url(args.out) else os.path.abspath(storage.local(args.out))
    summary = {
        "out": shown,
        "totals": m["totals"],
        "accounting": {k: v for k, v in acc.items() if k != "skipped_samples"},
    }
    if args.json:
        print_json(summary)
    else:  # -q hides progress only, never this summary
        t = Table(title=f"built {storage.redact(args.out)}", show_header=False)
        t.add_row("shards", str(m["totals"]["shards"]))
        t.add_row("samples written", str(acc["written"]))
        t.add_row("images", str(m["totals"]["images"]))
        t.add_row("bytes", human_bytes(m["totals"]["bytes"]))
        t.add_row("inputs seen", str(acc["seen"]))
        t.add_row("skipped", f"{acc['skipped']}" + (f" ({counts(acc['skipped_by_reason'])})" if acc["skipped"] else ""))
        out.print(t)
    short = build_shortfall(m, args.min_written_fraction, source=args.source, opts=opts)
    if short:
        err.print(shortfall_message(short), soft_wrap=True, markup=False)
        return EXIT_FAIL
    return EXIT_OK


def shortfall_message(short: dict) -> str:
    """The one-paragraph verdict for ``build_shortfall``: how much was written, why, and the likely fix."""
    pct = f"{100 * short['fraction']:.0f}%"
    head = f"error: wrote {short['written']} of {short['seen']} inputs ({pct})" + (
        "" if short["written"] == 0 else f", below --min-written-fraction {short['bar']:g}"
    )
    reasons = "; ".join(f"{r['count']} {r['reason']} (e.g. {r['example']})" for r in short["top_reasons"])
    lines = [head + (f": {reasons}" if reasons else "")]
    for h in short["hints"]:
        flag = f"--{h['param'].replace('_', '-')}" if h["param"] else None
        lines.append(f"likely fix: {flag + ': ' if flag else ''}{cli_flags(h['why'])}")
    if not short["hints"]:
        lines.append("run `vlmdata inspect OUT` for every skipped input and its reason")
    return "\n".join(lines)
