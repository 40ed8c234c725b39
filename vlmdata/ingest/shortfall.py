"""``build_shortfall``: whether a finished build wrote enough, and if not, why and what likely fixes it.

"Enough": at least one sample, and ``written >= min_written_fraction * seen`` (0 turns the fraction check off;
writing nothing always falls short). The answer names the top skip reasons with an example each, and hints
naming the option that likely fixes it (``image_root``, ``format``, ``allow_outside_root``, ...); the CLI turns a
shortfall into exit code 1 and shows the options as flags.
"""

from __future__ import annotations

from collections import Counter

from vlmdata import storage
from vlmdata.ingest.options import DEFAULT_MIN_WRITTEN_FRACTION, BuildOptions
from vlmdata.sources.jsonrecords import sniff


def build_shortfall(
    manifest: dict,
    min_written_fraction: float = DEFAULT_MIN_WRITTEN_FRACTION,
    source: str | None = None,
    opts: BuildOptions | None = None,
) -> dict | None:
    """None when a finished build wrote enough, else why not and what likely fixes it.

    Args:
        manifest: the manifest ``build`` returned.
        min_written_fraction: the bar (0 turns the fraction check off).
        source, opts: the build's source and options (for the hints).

    "Enough": at least one sample, and ``written >= min_written_fraction * seen`` (0 turns the fraction
    check off; writing nothing always falls short). Returns ``{"written", "seen", "fraction", "bar",
    "top_reasons": [{"reason", "count", "example"}], "hints": [{"param", "why"}]}``; ``param`` names
    the option that likely fixes it (``image_root``, ``format``, ``allow_outside_root``, ...) or None.
    """
    acc = manifest.get("accounting", {})
    seen, written = acc.get("seen", 0), acc.get("written", 0)
    if written > 0 and (min_written_fraction <= 0 or written >= min_written_fraction * seen):
        return None
    skips = acc.get("skipped_samples", [])
    counts = Counter(s.get("reason", "?") for s in skips)
    top = []
    for reason, n in counts.most_common(3):
        ex = next(s for s in skips if s.get("reason") == reason)
        top.append({"reason": reason, "count": n, "example": f"{ex.get('input')}: {ex.get('detail')}"})
    return {
        "written": written,
        "seen": seen,
        "fraction": (written / seen) if seen else 0.0,
        "bar": min_written_fraction,
        "top_reasons": top,
        "hints": _hints(counts, manifest, source, opts),
    }


def _hints(counts: Counter, manifest: dict, source: str | None, opts: BuildOptions | None) -> list[dict]:
    fmt = (manifest.get("source") or {}).get("format")
    opts = opts or BuildOptions()
    hints = []
    top = counts.most_common(1)[0][0] if counts else None
    if counts.get("missing_file") and fmt in ("llava", "messages"):
        if opts.image_root:
            hints.append(
                {
                    "param": "image_root",
                    "why": f"image paths were read relative to {opts.image_root}; "
                    "check that it is the folder the records' paths are relative to",
                }
            )
        else:
            where = storage.dirname(storage.local(source)) if source else "the JSON file's folder"
            hints.append(
                {
                    "param": "image_root",
                    "why": f"image paths were read relative to {storage.redact(where)} "
                    "(the JSON file's folder); give the folder they are relative to",
                }
            )
    if counts.get("outside_root"):
        hints.append(
            {
                "param": "allow_outside_root",
                "why": "records point to images outside the source root; allow it if you trust the records",
            }
        )
    if fmt in ("llava", "messages") and source and (counts.get("bad_record") or counts.get("bad_json")):
        try:
            looks = sniff(storage.local(source))
        except Exception:  # noqa: BLE001 - a hint must never fail the report
            looks = None
        if looks and looks != fmt:
            hints.append(
                {"param": "format", "why": f"the records look like '{looks}' data, the build read them as '{fmt}'"}
            )
    if fmt == "folder" and top == "missing_caption":
        hints.append({"param": None, "why": "each image needs a caption NAME.txt or NAME.json beside it"})
    if counts.get("too_large"):
        hints.append(
            {
                "param": "max_image_pixels",
                "why": "images above the pixel limit were skipped as possible "
                "decompression bombs; raise it if they are genuine",
            }
        )
    if counts.get("sample_too_large"):
        hints.append(
            {
                "param": "max_size",
                "why": "samples larger than a whole shard were skipped; raise the shard "
                "size or downscale with max_pixels",
            }
        )
    return hints
