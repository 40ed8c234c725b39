"""vlmdata validate OUT"""

from __future__ import annotations

import argparse

from rich.markup import escape

from vlmdata import storage
from vlmdata.cli.console import EXIT_FAIL, EXIT_OK, UserError, err, out, print_json, progress
from vlmdata.dataset.manifest import load_manifest
from vlmdata.dataset.validate import validate


def add_parser(sub):
    p = sub.add_parser(
        "validate",
        help="re-read every shard and check it",
        description=(
            "Re-read every shard: sha256, byte and sample counts and keys against manifest.json, every KEY.json against\n"
            "the schema and the text rules, every image against the validity rule (header, size, aspect ratio, end\n"
            "marker; by default at the level the dataset was built with, --decode to decode every pixel), and .nv-meta\n"
            "(present, unedited sample loader, Energon opens it). A single .tar shard is checked on its own.\n"
            "Exit 0 when clean, 1 with a list of (shard, key, problem); warnings never fail."
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "dataset",
        help="dataset folder (with manifest.json), local or an fsspec URL (s3://bucket/prefix), or one .tar shard",
    )
    level = p.add_mutually_exclusive_group()
    level.add_argument("--decode", action="store_true", help="decode every image (default: the build's --verify level)")
    level.add_argument("--no-decode", action="store_true", help="check image headers only, do not decode pixels")
    p.add_argument("--no-energon", action="store_true", help="do not check .nv-meta or open the dataset with Energon")
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    return p


def run(args) -> int:
    with storage.redacting():
        return _run(args)


def _run(args) -> int:
    decode = True if args.decode else False if args.no_decode else None
    total = None
    if not str(args.dataset).endswith(".tar"):  # ManifestError / StorageError: printed by vlmdata.cli.main
        total = load_manifest(args.dataset)["totals"]["samples"]
    try:
        with progress("validate", total=total, unit="samples", quiet=args.quiet or args.json) as advance:
            rep = validate(args.dataset, progress=advance, decode=decode, energon=not args.no_energon)
    except OSError as e:
        raise UserError(escape(f"{storage.redact(args.dataset)}: {storage.redact_text(e.strerror or e)}")) from None
    if args.json:
        print_json(rep.to_json())
    else:
        for p in rep.problems:
            err.print(str(p), markup=False, soft_wrap=True)
        for w in rep.warnings:
            err.print(f"warning: {w}", markup=False, soft_wrap=True)
        status = "[green]OK[/]" if rep.ok else f"[red]{len(rep.problems)} problem(s)[/]"  # printed even with -q
        how = "images decoded" if rep.level == "full" else "image headers checked (--decode to decode every pixel)"
        out.print(
            f"{status}: {rep.shards} shards, {rep.samples} samples, {rep.images} images; {how}"
            + (f"; {len(rep.warnings)} warning(s)" if rep.warnings else "")
        )
    return EXIT_OK if rep.ok else EXIT_FAIL
