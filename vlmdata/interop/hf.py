"""Reading vlmdata shards with Hugging Face ``datasets``.

``datasets.load_dataset("webdataset", data_files=...)`` infers its columns from the first five
samples, so a dataset whose samples have different numbers or formats of images needs the
columns given: ``hf_features(root)`` builds them from the manifest (every image file name that
occurs) and from the samples' JSON, and ``load_hf(root)`` does the whole call.

EXIF orientation: ``datasets`` rotates an image that carries an EXIF orientation when it decodes it,
Energon, Pillow and Megatron Bridge's path do not. ``vlmdata build`` stores such images upright (the
rotation applied, no orientation tag left), so every reader sees the same pixels and the sizes in the
sample JSON; ``vlmdata validate`` warns about oriented images in datasets built before that.
"""

from __future__ import annotations

import os
import re
from itertools import islice

from vlmdata.dataset.manifest import load_manifest, shard_paths
from vlmdata.dataset.schema import BadJSON, loads
from vlmdata.dataset.tar import TarReadError, iter_shard
from vlmdata.errors import VlmdataError


def hf_features(root: str, probe_samples: int = 64):
    import datasets
    import pyarrow as pa

    m = load_manifest(root)
    metas = []
    for path in shard_paths(root, m):
        try:
            for s in islice(iter_shard(path), probe_samples - len(metas)):
                try:
                    meta = loads(s.files["json"]) if "json" in s.files else None
                except BadJSON:
                    continue
                if isinstance(meta, dict):
                    metas.append(meta)
        except (OSError, TarReadError):
            continue  # a damaged shard: the columns come from the others
        if len(metas) >= probe_samples:
            break
    schema = pa.concat_tables([pa.Table.from_pylist([{"json": mm}]) for mm in metas], promote_options="default").schema
    features = datasets.Features.from_arrow_schema(schema) if metas else datasets.Features()
    features["__key__"] = datasets.Value("string")
    features["__url__"] = datasets.Value("string")
    for part in m["totals"].get("parts", []):
        if part != "json":
            features[part] = datasets.Image()
    return features


class HFLoadError(VlmdataError, ValueError):
    """``load_hf`` cannot read the dataset as asked (a bad split name, not a dataset)."""


MAX_SPLIT_NAME = 128
SPLIT_RE = re.compile(r"^\w+(\.\w+)*$")  # what ``datasets`` accepts as a split name


def load_hf(root: str, split: str = "train"):
    """The dataset as a Hugging Face ``datasets.Dataset`` (the webdataset loader with ``hf_features``).

    Args:
        root: a vlmdata dataset folder (or its manifest.json).
        split: the split name to give it (letters, digits, ``_``, dotted parts: what ``datasets`` accepts).

    Returns:
        The ``datasets.Dataset``. Raises ``ManifestError`` (not a dataset) or ``HFLoadError`` (a bad split).
    """
    if not isinstance(root, (str, os.PathLike)) or not str(os.fspath(root)).strip():
        raise HFLoadError(f"`root` must be a vlmdata dataset folder, got {root!r}"[:200])
    if not isinstance(split, str) or not SPLIT_RE.match(split) or len(split) > MAX_SPLIT_NAME:
        raise HFLoadError(  # a longer name made the cache file's name too long: a DatasetGenerationError
            f"`split` must be a name of at most {MAX_SPLIT_NAME} letters, digits and '_' (dotted parts allowed), "
            f"got {split!r}"[:200]
        )
    import datasets

    root = str(os.fspath(root))
    files = [p for p in shard_paths(root)]
    if not files:
        raise HFLoadError(f"{root}: the dataset has no shards, so there is nothing to load")
    return datasets.load_dataset("webdataset", data_files={split: files}, split=split, features=hf_features(root))


def image_columns(row: dict) -> list:
    """The images of one HF row, in the sample's order."""
    meta = row["json"]
    return [row[i["file"]] for i in meta["images"]]


__all__ = ["hf_features", "load_hf", "image_columns", "os"]
