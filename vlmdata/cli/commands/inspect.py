"""vlmdata inspect OUT"""

from __future__ import annotations

from rich.markup import escape
from rich.table import Table

from vlmdata import storage
from vlmdata.cli.console import EXIT_FAIL, EXIT_OK, UserError, err, human_bytes, out, print_json
from vlmdata.dataset.inspect import summarize
from vlmdata.dataset.manifest import ManifestError
from vlmdata.dataset.schema import safe_label


def add_parser(sub):
    p = sub.add_parser(
        "inspect",
        help="summary table of a dataset",
        description=(
            "Shards, samples, images, bytes, image size range, images per sample and the build's skip accounting.\n"
            "Shards or samples that cannot be read are listed (exit 1); `vlmdata validate` is the full check."
        ),
    )
    p.add_argument("dataset", help="dataset folder (with manifest.json)")
    p.add_argument("--json", action="store_true", help="print the summary as JSON")
    return p


def run(args) -> int:
    with storage.redacting():
        return _run(args)


def _run(args) -> int:
    try:
        s = summarize(args.dataset)
    except (ManifestError, storage.StorageError) as e:
        raise UserError(escape(storage.redact_text(e))) from None
    except OSError as e:
        raise UserError(escape(f"{storage.redact(args.dataset)}: {e.strerror or e}")) from None
    code = EXIT_FAIL if s["problems"] else EXIT_OK
    for p in s["problems"]:
        err.print(f"{p['shard']}\t{p['key'] or '-'}\t{p['problem']}", markup=False, soft_wrap=True)
    if args.json:
        print_json(s)
        return code
    t = Table(title=f"{s['path']} ({s['kind']})", show_header=False)
    for k in ("shards", "samples", "images"):
        t.add_row(k, str(s[k]))
    t.add_row("bytes", f"{human_bytes(s['bytes'])} (images {human_bytes(s['image_bytes'])})")
    if s["width_range"]:
        t.add_row(
            "image size",
            f"{s['width_range'][0]}-{s['width_range'][1]} x {s['height_range'][0]}-{s['height_range'][1]} px",
        )
        t.add_row("pixels per image", f"{s['pixels_range'][0]:,} - {s['pixels_range'][1]:,}")
    t.add_row("images per sample", ", ".join(f"{k}: {v}" for k, v in s["images_per_sample"].items()))
    t.add_row("formats", ", ".join(f"{k}: {v}" for k, v in s["formats"].items()))
    a = s["accounting"]
    t.add_row("inputs seen / written / skipped", f"{a['seen']} / {a['written']} / {a['skipped']}")
    for reason, n in a.get("skipped_by_reason", {}).items():  # the manifest's text: no markup, no escapes
        t.add_row(f"  skipped: {escape(safe_label(reason, 80))}", escape(safe_label(n, 40)))
    out.print(t)  # the summary: printed even with -q
    for sk in s["skipped_samples"][:20]:
        line = ": ".join(safe_label(sk.get(k)) for k in ("input", "reason", "detail"))  # a terminal escape in a
        out.print(f"  {line}", markup=False, soft_wrap=True)  # manifest (ESC[2J) reached the terminal as is
    if s["problems"]:
        err.print(
            f"{len(s['problems'])} problem(s) reading the dataset: run `vlmdata validate` for the full check",
            markup=False,
        )
    return code
