"""``vlmdata inspect``: a summary of a dataset from its manifest and the samples' JSON.

Never fails on damaged data: a shard that is missing or cannot be read to its end, and a sample
whose JSON is unusable, are listed in ``problems`` (shard, key, problem) and the summary covers
what could be read; ``vlmdata validate`` is the full check.
"""

from __future__ import annotations

import os
from collections import Counter

from vlmdata import storage
from vlmdata.dataset.manifest import load_manifest
from vlmdata.dataset.schema import BadJSON, loads, safe_label
from vlmdata.dataset.tar import TarReadError, iter_raw_samples


def _images(meta) -> list[dict] | None:
    infos = meta.get("images") if isinstance(meta, dict) else None
    if not isinstance(infos, list):
        return None
    ok = [
        i
        for i in infos
        if isinstance(i, dict)
        and all(isinstance(i.get(k), int) and not isinstance(i.get(k), bool) for k in ("width", "height"))
    ]
    return ok if len(ok) == len(infos) else None


def summarize(root: str) -> dict:
    """Totals, image size ranges, images per sample, formats and the build accounting of a dataset.

    Args:
        root: dataset folder (local or URL) with manifest.json.

    Returns:
        The summary dict; ``problems`` lists what could not be read. Raises ManifestError without a
        usable manifest.
    """
    m = load_manifest(root)
    root = storage.local(root)
    widths, heights, pixels, per_sample, formats = [], [], [], Counter(), Counter()
    problems: list[dict] = []
    read = 0
    for entry in m["shards"]:
        path = storage.join(root, entry["name"])
        try:
            with storage.open(path, "rb") as f:
                for raw in iter_raw_samples(f):
                    read += 1
                    try:
                        meta = loads(raw.files["json"]) if "json" in raw.files else None
                    except BadJSON as e:
                        meta, why = None, str(e)
                    else:
                        why = "no KEY.json" if meta is None else "json has no usable images list"
                    infos = _images(meta)
                    if infos is None:
                        problems.append({"shard": entry["name"], "key": safe_label(raw.key, 200), "problem": why})
                        continue
                    per_sample[len(infos)] += 1
                    for info in infos:
                        widths.append(info["width"])
                        heights.append(info["height"])
                        pixels.append(info["width"] * info["height"])
                        formats[safe_label(info.get("format"), 20)] += 1
        except FileNotFoundError:
            problems.append({"shard": entry["name"], "key": "", "problem": "shard file missing"})
        except TarReadError as e:
            problems.append({"shard": entry["name"], "key": safe_label(e.key or "", 200), "problem": str(e)})
        except (OSError, storage.StorageError) as e:
            problems.append(
                {"shard": entry["name"], "key": "", "problem": f"unreadable: {getattr(e, 'strerror', None) or e}"}
            )
    t = m["totals"]
    if read != t["samples"]:
        problems.append({"shard": "-", "key": "", "problem": f"{read} samples read, the manifest says {t['samples']}"})
    size = lambda f: [min(f), max(f)] if f else None  # noqa: E731
    acc = m["accounting"]
    return {
        "path": storage.redact(root) if storage.is_url(root) else os.path.abspath(root),
        "kind": m.get("kind", "?"),
        "shards": t.get("shards", len(m["shards"])),
        "samples": t["samples"],
        "images": t.get("images", len(pixels)),
        "bytes": t.get("bytes", 0),
        "image_bytes": t.get("image_bytes", 0),
        "width_range": size(widths),
        "height_range": size(heights),
        "pixels_range": size(pixels),
        "images_per_sample": dict(sorted(per_sample.items())),
        "formats": dict(formats),
        "accounting": {k: v for k, v in acc.items() if k != "skipped_samples"},
        "skipped_samples": acc.get("skipped_samples", []),
        "problems": problems,
    }
