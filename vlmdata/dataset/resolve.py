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

``check_output(out, inputs=..., own=...)`` is where every command's output path is checked before any work
(no command writes over its own input or a dataset's files): an output is never one of the command's
inputs (nor a link to one), never lies inside an input folder that is a build source (a file written there
would join the source), never replaces a file of a vlmdata dataset (``manifest.json``, its shards and
``.idx`` files, anything hidden beside them such as ``.nv-meta/``), and replaces an existing file only
when ``own(path)`` says it is of the kind the command writes (a profile over a profile, a report over a
report). ``OutputRefused`` names the output and the reason.
"""

from __future__ import annotations

import glob
import os
from dataclasses import dataclass
from typing import Callable, Iterable

from vlmdata import storage
from vlmdata.dataset.manifest import MANIFEST_NAME, load_manifest, shard_paths
from vlmdata.errors import VlmdataError

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


# ----------------------------------------------------------------------------- output paths


class OutputRefused(VlmdataError, ValueError):
    """An output path would write over an input, into a source folder, or over a file it does not own."""


def _real(p: str) -> str:
    return os.path.realpath(os.path.abspath(p))


def _inside(p: str, folder: str) -> bool:
    return p == folder or p.startswith(folder.rstrip(os.sep) + os.sep)


def dataset_file_of(path: str) -> str | None:
    """The vlmdata dataset folder whose own file ``path`` is (manifest.json, a top-level ``.tar`` or
    ``.tar.idx``, anything under a hidden entry such as ``.nv-meta/``), else None."""
    p = _real(path)
    parent = os.path.dirname(p)
    for depth in range(3):
        if os.path.isfile(os.path.join(parent, MANIFEST_NAME)):
            rel = os.path.relpath(p, parent).split(os.sep)
            name = rel[0]
            if name.startswith(".") or (
                depth == 0 and (name == MANIFEST_NAME or name.endswith((".tar", ".tar.idx", ".tar.tmp")))
            ):
                return parent
            return None
        up = os.path.dirname(parent)
        if up == parent:
            break
        parent = up
    return None


def _same_file(a: str, b: str) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False


def check_output(
    out: str,
    *,
    inputs: Iterable[str | None] = (),
    folder: bool = False,
    names: Iterable[str] = (),
    own: Callable[[str], bool] | None = None,
    what: str = "output",
) -> None:
    """Refuse an output path before any work is done (module docstring).

    Args:
        out: the file to write, or with ``folder`` the folder to write ``names`` into.
        inputs: the paths the command reads (files or folders; None ignored).
        folder: ``out`` is a folder.
        names: with ``folder``: the entries written into it (files, or folders such as a twin dataset).
        own: ``own(path)``: an existing target may be replaced (it is of the kind the command writes);
            None: no existing file is replaced.
        what: how messages name the output (a parameter name such as ```out```).

    Raises:
        OutputRefused: naming ``what``, the path and the reason.
    """
    out = storage.local(os.fspath(out))
    reads = [storage.local(os.fspath(i)) for i in inputs if i is not None]
    if storage.is_url(out):
        if out.rstrip("/") in {r.rstrip("/") for r in reads}:
            raise OutputRefused(f"{what} {storage.redact(out)} is an input of this command")
        return
    local_reads = [r for r in reads if not storage.is_url(r) and "\0" not in r]
    if folder and os.path.exists(out) and not os.path.isdir(out):
        raise OutputRefused(f"{what} {out} exists and is not a folder")
    targets = [os.path.join(out, n) for n in names] if folder else [out]
    for t in targets:
        _check_target(t, local_reads, own, what, out)
    if folder:  # the folder itself: never an input file, never inside a source folder
        _check_target(out, local_reads, None, what, out, is_folder=True)


def _check_target(
    t: str, reads: list[str], own: Callable[[str], bool] | None, what: str, out: str, is_folder: bool = False
) -> None:
    rt = _real(t)
    for r in reads:
        rr = _real(r)
        if rt == rr or _same_file(t, r):
            raise OutputRefused(f"{what} {t} is an input of this command ({r}): refusing to write over it")
        if not is_folder and os.path.isdir(rr) and _inside(rr, rt):
            raise OutputRefused(f"{what} {t} would replace the input folder {r}")
        if os.path.isdir(rr) and _inside(rt, rr) and not os.path.isfile(os.path.join(rr, MANIFEST_NAME)):
            raise OutputRefused(
                f"{what} {t} lies inside the input folder {r}: a file written there becomes part of the "
                "source; write it elsewhere"
            )
    if is_folder:
        return
    ds = dataset_file_of(t)
    if ds is not None:
        raise OutputRefused(f"{what} {t} is a file of the vlmdata dataset {ds}: refusing to write over it")
    if os.path.lexists(t):
        if os.path.isdir(t) and not os.path.islink(t):
            if own is None or not own(t):
                raise OutputRefused(f"{what} {t} is an existing folder vlmdata did not write; choose another path")
        elif own is None or not own(t):
            raise OutputRefused(
                f"{what} {t} exists and is not a file this command writes: refusing to replace it "
                "(remove it or choose another path)"
            )
