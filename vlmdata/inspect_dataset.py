"""``vlmdata inspect``: a summary of a dataset from its manifest and the samples' JSON."""

from __future__ import annotations

import json
import os
from collections import Counter

from .manifest import load_manifest
from .tario import iter_shard


def summarize(root: str) -> dict:
    m = load_manifest(root)
    widths, heights, pixels, per_sample, formats = [], [], [], Counter(), Counter()
    for entry in m["shards"]:
        for raw in iter_shard(os.path.join(root, entry["name"])):
            meta = json.loads(raw.files["json"])
            per_sample[len(meta["images"])] += 1
            for info in meta["images"]:
                widths.append(info["width"])
                heights.append(info["height"])
                pixels.append(info["width"] * info["height"])
                formats[info["format"]] += 1
    t = m["totals"]
    size = lambda f: [min(f), max(f)] if f else None  # noqa: E731
    return {
        "path": os.path.abspath(root),
        "kind": m["kind"],
        "shards": t["shards"],
        "samples": t["samples"],
        "images": t["images"],
        "bytes": t["bytes"],
        "image_bytes": t["image_bytes"],
        "width_range": size(widths),
        "height_range": size(heights),
        "pixels_range": size(pixels),
        "images_per_sample": dict(sorted(per_sample.items())),
        "formats": dict(formats),
        "accounting": {k: v for k, v in m["accounting"].items() if k != "skipped_samples"},
        "skipped_samples": m["accounting"]["skipped_samples"],
    }
