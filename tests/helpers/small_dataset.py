"""A small vlmdata dataset written by the dataset layer alone (planner, shard writer, manifest): what the tests of
vlmdata/dataset/ read, without the build."""

from __future__ import annotations

import io
import os

from PIL import Image

from vlmdata.dataset.manifest import Accounting, write_manifest
from vlmdata.dataset.schema import ImageInfo, Sample, user_assistant
from vlmdata.dataset.shards import Entry, Planner, write_shard


def jpeg(w: int = 40, h: int = 30, colour=(200, 40, 90)) -> bytes:
    buf = io.BytesIO()
    Image.new("RGB", (w, h), colour).save(buf, "JPEG", quality=90)
    return buf.getvalue()


def sample(i: int, n_images: int = 1) -> Sample:
    images = [jpeg(40 + 8 * j, 30, (i * 20 % 256, j * 60, 90)) for j in range(n_images)]
    infos = [ImageInfo(f"{j}.jpg", 40 + 8 * j, 30, "JPEG", len(d)) for j, d in enumerate(images)]
    conv = user_assistant(f"Question {i}?", f"Answer number {i}.", n_images)
    return Sample(f"s{i:09d}", conv, images, infos, source_id=f"src-{i}")


def write_small_dataset(out: str, n: int = 8, per_shard: int = 4, prefix: str = "shard") -> list[Sample]:
    """``n`` samples (sample ``i`` has ``1 + i % 2`` images) in shards of ``per_shard``, with a manifest; the
    samples written."""
    os.makedirs(out, exist_ok=True)
    samples = [sample(i, 1 + i % 2) for i in range(n)]
    planner, plans = Planner(prefix, per_shard, None), []
    for i, s in enumerate(samples):
        closed = planner.add(Entry.from_sample(s, i))
        if closed is not None:
            plans.append(closed)
    last, tail = planner.finish(n)
    plans += [last] if last is not None else []
    records = [write_shard(p, out, None) for p in plans]
    write_manifest(
        out,
        kind="build",
        prefix=prefix,
        records=records,
        accounting=Accounting.from_records(n, records, tail),
        options={},
        source={"format": "test"},
    )
    return samples
