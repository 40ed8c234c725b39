"""vlmdata inspect OUT"""

from __future__ import annotations

from rich.table import Table

from ..console import EXIT_OK, UserError, human_bytes, out, print_json
from ..inspect_dataset import summarize
from ..manifest import ManifestError


def add_parser(sub):
    p = sub.add_parser("inspect", help="summary table of a dataset", description=(
        "Shards, samples, images, bytes, image size range, images per sample and the build's skip accounting."))
    p.add_argument("dataset", help="dataset folder (with manifest.json)")
    p.add_argument("--json", action="store_true", help="print the summary as JSON")
    return p


def run(args) -> int:
    try:
        s = summarize(args.dataset)
    except ManifestError as e:
        raise UserError(str(e)) from None
    if args.json:
        print_json(s)
        return EXIT_OK
    t = Table(title=f"{s['path']} ({s['kind']})", show_header=False)
    for k in ("shards", "samples", "images"):
        t.add_row(k, str(s[k]))
    t.add_row("bytes", f"{human_bytes(s['bytes'])} (images {human_bytes(s['image_bytes'])})")
    if s["width_range"]:
        t.add_row("image size", f"{s['width_range'][0]}-{s['width_range'][1]} x {s['height_range'][0]}-{s['height_range'][1]} px")
        t.add_row("pixels per image", f"{s['pixels_range'][0]:,} - {s['pixels_range'][1]:,}")
    t.add_row("images per sample", ", ".join(f"{k}: {v}" for k, v in s["images_per_sample"].items()))
    t.add_row("formats", ", ".join(f"{k}: {v}" for k, v in s["formats"].items()))
    a = s["accounting"]
    t.add_row("inputs seen / written / skipped", f"{a['seen']} / {a['written']} / {a['skipped']}")
    for reason, n in a["skipped_by_reason"].items():
        t.add_row(f"  skipped: {reason}", str(n))
    out.print(t)  # the summary: printed even with -q
    for sk in s["skipped_samples"][:20]:
        out.print(f"  {sk['input']}: {sk['reason']}: {sk['detail']}", markup=False, soft_wrap=True)
    return EXIT_OK
