"""``open_dataset(path)``: what a path names, decided once for every command and the loaders.

A path (local, ``file://`` or an fsspec URL such as ``s3://bucket/prefix``; credentials in a URL are
refused) names one of:

* ``"dataset"``: a vlmdata dataset folder (``manifest.json`` inside) or its ``manifest.json``; the shards
  are the manifest's, in its order, checked to stay inside the folder;
* ``"shard"``: one ``.tar`` file;
* ``"shards"``: tar shards without a manifest: a glob pattern, or a folder holding ``*.tar`` (sorted);
* ``"other"``: something that exists but holds no shards (a build source: an image folder, a JSON file);
* ``"missing"``: nothing there.

The manifest is read and checked here (``ManifestError`` when it is unusable); nothing else is read.
Callers decide what a kind means to them (the loader refuses "other", the profile measures it as a build
source).
"""

from __future__ import annotations

import glob
import os
from dataclasses import dataclass

from vlmdata import storage
from vlmdata.dataset.manifest import MANIFEST_NAME, load_manifest, shard_paths

KINDS = ("dataset", "shard", "shards", "other", "missing")


@dataclass(frozen=True)
class DatasetRef:
    """A resolved path: ``path`` (as storage sees it), ``shown`` (for messages: absolute or redacted),
    ``kind`` (one of ``KINDS``), ``remote``, ``root`` (the dataset folder of kind "dataset"), ``shards``
    (their paths in order; empty unless kind is "dataset", "shard" or "shards") and ``manifest``."""

    path: str
    shown: str
    kind: str
    remote: bool
    root: str | None = None
    shards: tuple[str, ...] = ()
    manifest: dict | None = None


def _is_glob(path: str) -> bool:
    return any(c in (path.split("://", 1)[1] if "://" in path else path) for c in "*?[")


def open_dataset(path: str | os.PathLike) -> DatasetRef:
    """Resolve ``path`` (see the module docstring).

    Args:
        path: a dataset folder, its manifest.json, a .tar shard, a glob of shards, a folder of shards,
            or anything else (reported as "other" / "missing"); local or an fsspec URL.

    Returns:
        The ``DatasetRef``. Raises ``StorageError`` (credentials in a URL) and ``ManifestError`` (a
        manifest that cannot be used).
    """
    p = storage.local(os.fspath(path))
    remote = storage.is_url(p)
    shown = storage.redact(p) if remote else os.path.abspath(p) if "\0" not in p else repr(p)
    if "\0" in p:
        return DatasetRef(p, shown, "missing", remote)
    if remote:
        return _open_remote(p, shown)
    if os.path.isdir(p):
        if os.path.exists(os.path.join(p, MANIFEST_NAME)):
            m = load_manifest(p)
            return DatasetRef(p, shown, "dataset", False, p, tuple(shard_paths(p, m)), m)
        tars = sorted(glob.glob(os.path.join(glob.escape(p), "*.tar")))
        return DatasetRef(p, shown, "shards" if tars else "other", False, shards=tuple(tars))
    if os.path.isfile(p):
        if p.endswith(".tar"):
            return DatasetRef(p, shown, "shard", False, shards=(p,))
        if os.path.basename(p) == MANIFEST_NAME:
            m = load_manifest(p)
            root = os.path.dirname(p)
            return DatasetRef(p, shown, "dataset", False, root, tuple(shard_paths(p, m)), m)
        return DatasetRef(p, shown, "other", False)
    if _is_glob(p):
        tars = sorted(glob.glob(p))
        return DatasetRef(p, shown, "shards" if tars else "missing", False, shards=tuple(tars))
    return DatasetRef(p, shown, "missing", False)


def _open_remote(p: str, shown: str) -> DatasetRef:
    if _is_glob(p):
        fs, inner = storage.fs_and_path(p, fresh=True)
        tars = sorted(f"{storage.protocol(p)}://{q.lstrip('/')}" for q in fs.glob(inner) if q.endswith(".tar"))
        return DatasetRef(p, shown, "shards" if tars else "missing", True, shards=tuple(tars))
    if p.endswith(".tar"):
        return DatasetRef(
            p, shown, "shard" if storage.isfile(p) else "missing", True, shards=(p,) if storage.isfile(p) else ()
        )
    if p.endswith(".json") and storage.basename(p) == MANIFEST_NAME and storage.exists(p):
        m = load_manifest(p)
        return DatasetRef(p, shown, "dataset", True, storage.dirname(p), tuple(shard_paths(p, m)), m)
    if storage.exists(storage.join(p, MANIFEST_NAME)):
        m = load_manifest(p)
        return DatasetRef(p, shown, "dataset", True, p, tuple(shard_paths(p, m)), m)
    if not storage.exists(p):
        return DatasetRef(p, shown, "missing", True)
    tars = tuple(q for q in storage.ls(p) if q.endswith(".tar"))
    return DatasetRef(p, shown, "shards" if tars else "other", True, shards=tars)
