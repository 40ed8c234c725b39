"""Readers for image-text sources; ``open_source`` picks one by ``format`` or by looking.

Parameter names appear in messages in backquotes (```format```); the CLI shows them as flags.
``source_fingerprint`` describes a source's current content cheaply (sizes, modification times and a
hash of record files) so that a resumed build can refuse a source that changed.
"""

from __future__ import annotations

import hashlib
import os
import stat
from typing import Iterator

from vlmdata import storage
from vlmdata.sources.base import SourceError, SourceItem, check_folder_root, walk_files
from vlmdata.sources.folder import IMAGE_SUFFIXES, UNSUPPORTED_IMAGE_SUFFIXES, iter_folder, iter_folder_url
from vlmdata.sources.hfdataset import is_hf_dir, iter_hf
from vlmdata.sources.jsonrecords import iter_json_source, sniff
from vlmdata.sources.text import DEFAULT_PROMPT

FORMATS = ("folder", "llava", "messages", "hf")


def _detect_url(path: str) -> str:
    if path.endswith((".json", ".jsonl")) and storage.isfile(path):
        fmt = sniff(path)
        if fmt:
            return fmt
        raise SourceError(
            f"{storage.redact(path)}: JSON records have neither 'conversations' (LLaVA) nor 'messages'; set `format`"
        )
    if storage.isdir(path):
        return "folder"
    raise SourceError(
        f"{storage.redact(path)}: cannot tell the format of a remote source (expected a folder or "
        ".json/.jsonl; Hugging Face datasets are read from local paths only); set `format`"
    )


def _check_regular(path: str) -> None:
    try:
        st = os.stat(path)
    except OSError as e:
        raise SourceError(f"{path}: {e.strerror}") from None
    if not stat.S_ISREG(st.st_mode) and not stat.S_ISDIR(st.st_mode):
        raise SourceError(f"{path}: not a regular file or a folder")
    check_folder_root(path)  # nothing under /proc, /sys or /dev is a data source


def detect_format(path: str) -> str:
    path = storage.local(path)
    if storage.is_url(path):
        return _detect_url(path)
    if not os.path.exists(path):
        raise SourceError(f"{path}: no such file or directory")
    _check_regular(path)
    if os.path.isdir(path):
        return "hf" if is_hf_dir(path) else "folder"
    if path.endswith(".parquet"):
        return "hf"
    if path.endswith((".json", ".jsonl")):
        fmt = sniff(path)
        if fmt:
            return fmt
        raise SourceError(f"{path}: JSON records have neither 'conversations' (LLaVA) nor 'messages'; set `format`")
    raise SourceError(f"{path}: cannot tell the format (expected a folder, .json/.jsonl or .parquet); set `format`")


def open_source(
    path: str,
    fmt: str | None = None,
    *,
    image_root: str | None = None,
    prompt: str = DEFAULT_PROMPT,
    image_column: str | None = None,
    text_column: str | None = None,
    deferred: bool = False,
    allow_outside_root: bool = False,
) -> tuple[str, Iterator[SourceItem]]:
    """(format, items) for a source path. Raises SourceError for a bad path or format.

    ``deferred``: items may carry unparsed records; call ``item.resolve()`` before using one.
    ``allow_outside_root``: read image paths of records that lie outside the source root (the image
    root for JSON sources, the dataset folder for Hugging Face path cells)."""
    if fmt is not None and fmt not in FORMATS:
        raise SourceError(f"unknown format {fmt!r} (choose from {', '.join(FORMATS)})")
    path = storage.local(path)
    if image_root is not None:
        image_root = storage.local(image_root)
        if not storage.is_url(image_root) and not os.path.isdir(image_root):
            raise SourceError(f"{image_root}: `image_root` is not a folder")
    if storage.is_url(path):
        try:
            found = storage.exists(path)
        except (storage.StorageError, OSError) as e:
            raise SourceError(f"{storage.redact(path)}: {storage.redact_text(e)}") from None
        if not found:
            raise SourceError(f"{storage.redact(path)}: no such file or directory")
        fmt = fmt or detect_format(path)
        if fmt == "folder":
            return fmt, iter_folder_url(path, prompt)
        if fmt in ("llava", "messages"):
            return fmt, iter_json_source(path, fmt, image_root, deferred, allow_outside_root)
        raise SourceError(f"{storage.redact(path)}: format {fmt} is read from local paths only")
    if "\0" in path:
        raise SourceError("source path contains a NUL byte")
    if not os.path.exists(path):
        raise SourceError(f"{path}: no such file or directory")
    _check_regular(path)
    fmt = fmt or detect_format(path)
    if fmt == "folder":
        if not os.path.isdir(path):
            raise SourceError(f"{path}: format folder needs a directory")
        return fmt, iter_folder(path, prompt)
    if fmt in ("llava", "messages"):
        if not os.path.isfile(path):
            raise SourceError(f"{path}: format {fmt} needs a JSON or JSONL file")
        return fmt, iter_json_source(path, fmt, image_root, deferred, allow_outside_root)
    return fmt, iter_hf(path, prompt, image_column, text_column, allow_outside_root, image_root)


def _hash_file(h, path: str) -> None:
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            h.update(chunk)


def source_fingerprint(path: str, fmt: str, exclude: str | None = None) -> str:
    """A sha256 over what decides a source's items: for a folder the relative path, size and modification
    time of every file (images and sidecars), for a JSON/JSONL file or a Hugging Face dataset the bytes of
    its record files (and their sizes and times). Images that records point to outside a folder source
    are not included (their size is checked again when they are copied into a shard). Files below
    ``exclude`` (the build's own output folder, when it lies inside the source) are left out."""
    h = hashlib.sha256(fmt.encode() + b"\0")
    path = storage.local(path)
    if storage.is_url(path):
        fs, inner = storage.fs_and_path(path, fresh=True)
        if fmt == "folder":
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
            if fmt == "folder" and os.path.splitext(rel)[1].lower() not in (
                IMAGE_SUFFIXES | UNSUPPORTED_IMAGE_SUFFIXES | {".txt", ".json"}
            ):
                continue
            try:
                st = os.stat(os.path.join(path, rel))
            except OSError:
                continue
            h.update(rel.encode("utf-8", "surrogateescape") + f"\0{st.st_size}\0{st.st_mtime_ns}\0".encode())
            if (
                fmt == "hf"
                and stat.S_ISREG(st.st_mode)
                and rel.endswith((".json", ".arrow", ".parquet"))
                and st.st_size <= 64 << 20
            ):
                _hash_file(h, os.path.join(path, rel))
        return h.hexdigest()
    st = os.stat(path)
    h.update(f"{st.st_size}\0".encode())
    _hash_file(h, path)
    return h.hexdigest()


__all__ = ["FORMATS", "SourceError", "SourceItem", "detect_format", "open_source", "source_fingerprint"]
