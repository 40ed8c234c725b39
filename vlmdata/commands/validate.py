"""vlmdata validate OUT"""

from __future__ import annotations

from rich.markup import escape

from .. import storage
from ..console import EXIT_FAIL, EXIT_OK, UserError, err, out, print_json, progress
from ..manifest import ManifestError, load_manifest
from ..validate import validate


def add_parser(sub):
    p = sub.add_parser("validate", help="re-read every shard and check it", description=(
        "Re-read every shard: sha256, byte and sample counts against manifest.json, every image decodes,\n"
        "every KEY.json parses and matches the schema. Exit 0 when clean, 1 with a list of (shard, key, problem)."),
        formatter_class=__import__("argparse").RawDescriptionHelpFormatter)
    p.add_argument("dataset", help="dataset folder (with manifest.json), local or an fsspec URL (s3://bucket/prefix)")
    p.add_argument("--no-decode", action="store_true", help="check image headers only, do not decode pixels")
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    return p


def run(args) -> int:
    try:
        total = load_manifest(args.dataset)["totals"]["samples"]
    except ManifestError as e:
        raise UserError(str(e)) from None
    try:
        with progress("validate", total=total, unit="samples", quiet=args.quiet or args.json) as advance:
            rep = validate(args.dataset, progress=advance, decode=not args.no_decode)
    except (storage.StorageError, OSError) as e:
        raise UserError(escape(f"{storage.redact(args.dataset)}: {e}")) from None
    if args.json:
        print_json(rep.to_json())
    else:
        for p in rep.problems:
            err.print(str(p), markup=False, soft_wrap=True)
        status = "[green]OK[/]" if rep.ok else f"[red]{len(rep.problems)} problem(s)[/]"  # printed even with -q
        out.print(f"{status}: {rep.shards} shards, {rep.samples} samples, {rep.images} images")
    return EXIT_OK if rep.ok else EXIT_FAIL
