"""Readers for image-text sources; ``open_source(path, request)`` picks one by the request's ``format`` or by
looking (``detect_format``) and hands it the request whole.

The formats are one registry (``FORMATS``, ``sources/formats.py``: folder, llava, messages, hf); this module
reads only the registry. Every option of how a source is read is one frozen, self-checking ``SourceRequest``
(``sources/request.py``), the object ``BuildOptions.source`` and ``ProfileOptions.source`` hold. Parameter names
appear in messages in backquotes (```format```); the CLI shows them as flags. ``source_fingerprint`` describes a
source's current content cheaply (sizes, modification times and a hash of record files) so that a resumed build
can refuse a source that changed.
"""

from __future__ import annotations

import hashlib
import os
import stat
from typing import Any, Iterator

from vlmdata import storage
from vlmdata.sources.base import SourceError, SourceItem, check_folder_root, walk_files
from vlmdata.sources.formats import FORMATS, Format, detectors, register_format
from vlmdata.sources.request import ReadRequest, SourceOptionsError, SourceRequest, folded
from vlmdata.sources.text import DEFAULT_PROMPT


def _check_regular(path: str) -> None:
    try:
        st = os.stat(path)
    except OSError as e:
        raise SourceError(f"{path}: {e.strerror}") from None
    if not stat.S_ISREG(st.st_mode) and not stat.S_ISDIR(st.st_mode):
        raise SourceError(f"{path}: not a regular file or a folder")
    check_folder_root(path)  # nothing under /proc, /sys or /dev is a data source


def _detect(path: str) -> str | None:
    for detect in detectors():
        fmt = detect(path)
        if fmt is not None:
            return fmt
    return None


def detect_format(path: str) -> str:
    """The registered format of the source at ``path`` (local or URL); SourceError when none claims it."""
    path = storage.local(path)
    if storage.is_url(path):
        fmt = _detect(path)
        if fmt is None:
            raise SourceError(
                f"{storage.redact(path)}: cannot tell the format of a remote source (expected a folder or "
                ".json/.jsonl; Hugging Face datasets are read from local paths only); set `format`"
            )
        return fmt
    if not os.path.exists(path):
        raise SourceError(f"{path}: no such file or directory")
    _check_regular(path)
    fmt = _detect(path)
    if fmt is None:
        raise SourceError(f"{path}: cannot tell the format (expected a folder, .json/.jsonl or .parquet); set `format`")
    return fmt


def open_source(
    path: str,
    request: SourceRequest | str | None = None,
    *,
    deferred: bool = False,
    **options: Any,
) -> tuple[str, Iterator[SourceItem]]:
    """(format, items) for a source path. Raises SourceError for a bad path, format or request.

    Args:
        path: the source (local path or URL).
        request: how to read it (``SourceRequest``: format, image root, prompt, columns, ...), handed to the
            format's reader whole; a string or None is the older form, the format alone (None: detected).
        deferred: items may carry unparsed records; call ``item.resolve()`` before using one.
        **options: ``SourceRequest`` fields given as keywords (``image_root=``, ``prompt=``, ...), applied on
            top of ``request`` (the older form, ``fmt=`` included; ``SourceOptionsError`` for an unknown name or a
            bad value).
    """
    if "fmt" in options:  # the older name of the second argument
        options["format"] = options.pop("fmt")
    if isinstance(request, SourceRequest):
        request = folded(request, **options)
    else:
        request = folded(None, **{"format": request, **options})
    if request.format is not None:
        FORMATS[request.format]  # SourceError naming the choices for an unknown one
    path = storage.local(path)
    image_root = request.image_root
    if image_root is not None:
        image_root = storage.local(image_root)
        if not storage.is_url(image_root) and not os.path.isdir(image_root):
            raise SourceError(f"{image_root}: `image_root` is not a folder")
    given = {**request.to_dict(), "image_root": image_root}
    return _read(path, request.format, ReadRequest(**given, deferred=deferred))


def _read(path: str, fmt: str | None, request: ReadRequest) -> tuple[str, Iterator[SourceItem]]:
    """(format, items) of a checked request: the path's checks, then the format's reader."""
    if storage.is_url(path):
        try:
            found = storage.exists(path)
        except (storage.StorageError, OSError) as e:
            raise SourceError(f"{storage.redact(path)}: {storage.redact_text(e)}") from None
        if not found:
            raise SourceError(f"{storage.redact(path)}: no such file or directory")
        entry = FORMATS[fmt or detect_format(path)]
        if not entry.remote:
            raise SourceError(f"{storage.redact(path)}: format {entry.name} is read from local paths only")
        return entry.name, entry.read(path, request)
    if "\0" in path:
        raise SourceError("source path contains a NUL byte")
    if not os.path.exists(path):
        raise SourceError(f"{path}: no such file or directory")
    _check_regular(path)
    entry = FORMATS[fmt or detect_format(path)]
    if entry.needs is not None and not (os.path.isdir if entry.needs[0] == "dir" else os.path.isfile)(path):
        raise SourceError(f"{path}: format {entry.name} needs {entry.needs[1]}")
    return entry.name, entry.read(path, request)


def _hash_file(h, path: str) -> None:
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            h.update(chunk)


def source_fingerprint(path: str, fmt: str, exclude: str | None = None) -> str:
    """A sha256 over what decides a source's items: for a folder the relative path, size and modification
    time of every file (images and sidecars), for a JSON/JSONL file or a Hugging Face dataset the bytes of
    its record files (and their sizes and times). Images that records point to outside a folder source
    are not included (their size is checked again when they are copied into a shard). Files below
    ``exclude`` (the build's own output folder, when it lies inside the source) are left out. What a folder's
    fingerprint covers is its format's (``Format.members``, ``Format.hashed``)."""
    h = hashlib.sha256(fmt.encode() + b"\0")
    entry = FORMATS[fmt]
    path = storage.local(path)
    if storage.is_url(path):
        fs, inner = storage.fs_and_path(path, fresh=True)
        if entry.needs is not None and entry.needs[0] == "dir":
            for name, info in sorted(fs.find(inner, detail=True).items()):
                h.update(f"{name}\0{info.get('size')}\0{info.get('ETag') or info.get('LastModified') or ''}\0".encode())
        else:
            info = fs.info(inner)
            h.update(f"{info.get('size')}\0{info.get('ETag') or info.get('LastModified') or ''}".encode())
            h.update(storage.cat(path))
        return h.hexdigest()
    if os.path.isdir(path):
        skip = os.path.realpath(exclude) if exclude else None
        for rel in sorted(walk_files(path), key=lambda r: r.encode("utf-8", "surrogateescape")):
            if skip and os.path.realpath(os.path.join(path, rel)).startswith(skip.rstrip(os.sep) + os.sep):
                continue
            if entry.members is not None and os.path.splitext(rel)[1].lower() not in entry.members:
                continue
            try:
                st = os.stat(os.path.join(path, rel))
            except OSError:
                continue
            h.update(rel.encode("utf-8", "surrogateescape") + f"\0{st.st_size}\0{st.st_mtime_ns}\0".encode())
            if entry.hashed and stat.S_ISREG(st.st_mode) and rel.endswith(entry.hashed) and st.st_size <= 64 << 20:
                _hash_file(h, os.path.join(path, rel))
        return h.hexdigest()
    st = os.stat(path)
    h.update(f"{st.st_size}\0".encode())
    _hash_file(h, path)
    return h.hexdigest()


__all__ = [
    "DEFAULT_PROMPT",
    "FORMATS",
    "Format",
    "SourceError",
    "SourceItem",
    "SourceOptionsError",
    "SourceRequest",
    "detect_format",
    "open_source",
    "register_format",
    "source_fingerprint",
]
